"""How long a test waits on a process before it calls the run hung, and
the one wait for a file a process makes.

Every wait in these tests is on an event: a file appearing, a record
line, a process exiting. This bound only ends a run that is stuck; it is
not a speed target. Under `make race` many packages run at once on a few
cores, and a node can take minutes to start, so the bound is generous.
LONGSHORE_TEST_HANG_S overrides it.
"""

import os
import time

HANG_S = float(os.environ.get("LONGSHORE_TEST_HANG_S", "600"))


def wait_for_path(path, proc, what, log=None):
    """Returns once path exists. Raises if proc (a Popen) exits first, with
    log() or else its stderr pipe, or if HANG_S pass, with log() only: the
    pipe of a live process would block."""
    deadline = time.monotonic() + HANG_S
    while not os.path.exists(path):
        if proc.poll() is not None:
            out = log() if log else (proc.stderr.read() if proc.stderr else "")
            raise RuntimeError(f"{what} exited ({proc.returncode}) before {path} appeared:\n{out}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} made no {path} in {HANG_S:.0f} s:\n{log() if log else ''}")
        time.sleep(0.05)
    return path
