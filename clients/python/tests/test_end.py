"""When a standalone node's job is over for a trainer: when the trainer
read its stream to the end (the end, or the last epoch's end before it),
not when the node wrote the end into its socket (a trainer that stopped
short and comes back: test_raw's resume; delivery's end_test.go)."""

import longshore
from limits import HANG_S


def test_one_epoch_loop_ends_the_node(start_node, tiny_dataset, tmp_path):
    """docs/trainers.md's quick start over a one-epoch job: `for batch in
    loader` stops at the epoch's end, never reads the end behind it, and
    the trainer exits without close(); the node must see the job done and
    exit 0 (release-check's loop hung with a node waiting)."""
    root, keys = tiny_dataset
    node = start_node(["--dataset", root, "--epochs", 1, "--batch-size", 16, "--progress", "never"],
                      str(tmp_path / "feed"))
    loader = longshore.Loader(node.socket(), timeout=HANG_S)
    n = 0
    for batch in loader:
        n += len(batch)
        del batch
    assert n == len(keys)
    del loader  # no close(): the process would just exit here
    assert node.wait() == 0, node.stderr

