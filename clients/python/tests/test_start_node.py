"""start_node (conftest), the one launcher of a standalone node: a node
that exits before its socket appears fails the wait with its stderr; a
test that fails has its nodes' stderr in its report, and its nodes that
still run are killed at teardown."""

import os
import signal

import pytest

import conftest

pytest_plugins = ["pytester"]


def test_node_that_exits_early_shows_its_stderr(start_node, tmp_path):
    node = start_node(["--dataset", tmp_path / "nowhere", "--progress", "never"], tmp_path / "feed")
    with pytest.raises(RuntimeError, match=r"(?s)the standalone node exited \(1\).*nowhere"):
        node.socket()
    assert node.wait() == 1
    assert "nowhere" in node.stderr


INNER = """
import pytest

@pytest.fixture
def cluster_bins():
    return {bins!r}

def test_exited(start_node, tmp_path):
    node = start_node(["--dataset", tmp_path / "nowhere", "--progress", "never"], tmp_path / "feed")
    assert node.wait() == 1
    assert False, "the test fails after its node exited"

def test_alive(start_node, tiny_dataset, tmp_path):
    node = start_node(["--dataset", tiny_dataset[0], "--epochs", 1000, "--size", 16, "--transform", "resize",
                       "--progress", "never"], {feed!r})  # the inner tmp_path: too long for a socket path
    node.socket()
    with open({pid!r}, "w") as f:
        f.write(str(node.pid))
    assert False, "the test fails while its node serves"
"""


def test_failed_test_reports_stderr_and_kills_its_node(pytester, cluster_bins, tmp_path):
    pid_path = str(tmp_path / "pid")
    pytester.makepyfile(test_inner=INNER.format(bins=tuple(cluster_bins), pid=pid_path, feed=str(tmp_path / "feed")))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", plugins=[conftest])
    # test_alive's node was serving when the test failed: gone after teardown
    # (killed here if not, before any other check can fail and leave it)
    with open(pid_path) as f:
        pid = int(f.read())
    alive = os.path.exists(f"/proc/{pid}")
    if alive:
        os.kill(pid, signal.SIGKILL)
    result.assert_outcomes(failed=2)
    assert not alive, f"node {pid} still ran after its test's teardown"
    # test_exited's report: its node's stderr, in a section of its own
    out = result.stdout.str()
    exited = out[out.index("_ test_exited _"):out.index("_ test_alive _")]
    assert "node-1 stderr (call)" in exited and "nowhere" in exited, out
