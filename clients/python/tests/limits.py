"""How long a test waits on a process before it calls the run hung.

Every wait in these tests is on an event: a file appearing, a record
line, a process exiting. This bound only ends a run that is stuck; it is
not a speed target. Under `make race` many packages run at once on a few
cores, and a node can take minutes to start, so the bound is generous.
LONGSHORE_TEST_HANG_S overrides it.
"""

import os

HANG_S = float(os.environ.get("LONGSHORE_TEST_HANG_S", "600"))
