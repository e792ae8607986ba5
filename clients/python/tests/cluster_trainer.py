"""A trainer process for the cluster tests: reads its rank's batches with
longshore.Loader, "trains" (sleeps), commits every --commit-every steps
and at the end of each epoch's stream, and on longshore.RolledBack checks
that the rollback names its last acknowledged commit, "restores" that
checkpoint (drops the batches trained after it) and reads on.

Its model is the list of batches it trained on. Every event goes to
--record as a JSON line, for the test to check the promise (exactly once
in committed history) independently:

    {"ev": "batch", "epoch", "step", "era", "keys": [real samples], "eos"[, "px": [digests]]}
    {"ev": "ack", "epoch", "step", "token"}        a commit acknowledged
    {"ev": "commit_rolled_back"}                   a commit's era ended
    {"ev": "rollback", "epoch", "step", "token", "committed"}
    {"ev": "end", "trained", "committed"}
"""

import argparse
import hashlib
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import longshore  # noqa: E402
from limits import HANG_S


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--commit-every", type=int, default=3)
    ap.add_argument("--step-time", type=float, default=0.05, help="seconds of simulated training per batch")
    ap.add_argument("--pixels", action="store_true", help="record each real sample's pixel digest (px)")
    a = ap.parse_args()
    rec = open(a.record, "a", buffering=1)

    def log(**ev):
        rec.write(json.dumps(ev) + "\n")

    loader = longshore.Loader(a.socket, timeout=HANG_S)
    hist = []        # the model: (epoch, step, keys) of every batch trained on
    committed = 0    # len(hist) at the last acknowledged commit (the checkpoint)
    last_ack = None  # (epoch, step, token) of it

    def commit():
        nonlocal committed, last_ack
        try:
            tok = loader.commit()
        except longshore.RolledBack:
            log(ev="commit_rolled_back")  # the next read raises the rollback
            return
        longshore.parse_token(tok)  # a journal token, checksum and all
        e, s, _ = loader._committed
        committed, last_ack = len(hist), (e, s, tok)
        log(ev="ack", epoch=e, step=s, token=tok.decode())

    while True:
        try:
            b = loader.next_batch()
        except longshore.RolledBack as rb:
            tok = rb.token.decode() if rb.token else None
            log(ev="rollback", epoch=rb.epoch, step=rb.step, token=tok, committed=rb.committed)
            if last_ack is None:
                assert not rb.committed, f"rollback to {rb.epoch}/{rb.step} but nothing was acknowledged"
            else:
                assert rb.committed and (rb.epoch, rb.step, rb.token) == last_ack, \
                    f"rollback to {rb.epoch}/{rb.step} {rb.token}, last ack {last_ack}"
            del hist[committed:]  # restore the checkpoint
            continue
        if b is None:
            if loader.ended:
                break
            if len(hist) > committed:  # an epoch's end: commit what is left
                commit()
            continue
        keys = [k for k, pad in zip(b.keys, b.pads) if not pad]
        hist.append((b.epoch, b.step, keys))
        ev = dict(ev="batch", epoch=b.epoch, step=b.step, era=b.era, keys=keys, eos=b.end_of_stream)
        if a.pixels:
            ev["px"] = [pixel_digest(b.images[i]) for i, pad in enumerate(b.pads) if not pad]
        log(**ev)
        b.release()
        time.sleep(a.step_time)
        if len(hist) - committed >= a.commit_every or b.end_of_stream:
            commit()
    if len(hist) > committed:
        commit()
    log(ev="end", trained=len(hist), committed=committed)
    loader.close()


def pixel_digest(sample):
    """A sample's pixels as the trainer got them, digested (8 bytes hex)."""
    return hashlib.blake2b(sample.tobytes(), digest_size=8).hexdigest()


if __name__ == "__main__":
    main()
