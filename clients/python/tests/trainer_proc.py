"""A trainer process for the kill -9 test: consumes, commits at --commit-at
(writing the token to --token-out), keeps consuming to --stop-at, says
"ready" and waits to be killed."""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import longshore  # noqa: E402
from limits import HANG_S

ap = argparse.ArgumentParser()
ap.add_argument("--socket")
ap.add_argument("--commit-at", type=int)
ap.add_argument("--stop-at", type=int)
ap.add_argument("--token-out")
a = ap.parse_args()
loader = longshore.Loader(a.socket, timeout=HANG_S)
held = []
for b in loader:
    held.append(b)  # keep every batch: the node must free them on kill
    if len(held) > 2:
        held.pop(0).release()
    if b.step == a.commit_at:
        tok = loader.commit()
        with open(a.token_out + ".tmp", "wb") as f:
            f.write(tok)
        os.rename(a.token_out + ".tmp", a.token_out)
    if b.step == a.stop_at:
        break
print("ready", flush=True)
time.sleep(600)
