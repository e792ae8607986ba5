"""A trainer launched beside its node, in any order: the socket path
exists only once the node accepts on it, and the client waits for a node
that is starting (docs/feed-protocol.md, "Transport")."""

import logging
import os
import socket
import threading

import pytest

import longshore
from limits import HANG_S
from tinynode import launch, stop


def test_connect_the_moment_the_socket_appears(server_bin, tiny_dataset, tmp_path):
    """100 launches of a node, each with a trainer that connects once, with
    no retry (connect_timeout=0), the moment the socket path appears: every
    connect must be accepted (bind(2) makes the file before listen(2); a
    connect between them is refused). Before the node renamed its socket
    into place this failed within 100 launches (at launch 55, and at launch 0,
    in two runs against the old node)."""
    for i in range(100):
        feed_dir = str(tmp_path / f"f{i}")
        sock = os.path.join(feed_dir, "rank-0.sock")
        proc = launch(server_bin, tiny_dataset[0], feed_dir)
        try:
            while not os.path.exists(sock):  # spin: no sleep, connect as soon as it is there
                if proc.poll() is not None:
                    raise AssertionError(f"launch {i}: feed_server exited {proc.returncode}: {proc.stderr.read()}")
            with longshore.Loader(sock, timeout=HANG_S, connect_timeout=0) as loader:  # one connect, no retry
                try:
                    w = loader.welcome
                except longshore.ConnectTimeout as e:
                    raise AssertionError(f"launch {i}: a connect as soon as {sock} appeared: {e!r}") from e
                assert w["batch_size"] == 8
        finally:
            stop(proc)


class _Waiting(logging.Handler):
    """Sets `event` when the loader logs that it waits for its node."""

    def __init__(self, event):
        super().__init__()
        self.event = event
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())
        self.event.set()


@pytest.mark.parametrize("stale", [False, True], ids=["absent", "stale"])
def test_trainer_started_before_its_node(server_bin, tiny_dataset, tmp_path, stale):
    """A trainer started before its node (no socket directory yet; or a
    killed node's socket, which refuses) waits for it and gets the epoch."""
    feed_dir = str(tmp_path / "feed")
    sock = os.path.join(feed_dir, "rank-0.sock")
    if stale:
        os.makedirs(feed_dir, mode=0o700)
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(sock)  # bound, never listening: connects are refused
        dead.close()
    progress = threading.Event()  # the loader waits, or the trainer ended
    handler = _Waiting(progress)
    log = logging.getLogger("longshore")
    log.addHandler(handler)
    old_level = log.level
    log.setLevel(logging.INFO)
    got, err = [], []

    def trainer():
        try:
            with longshore.Loader(sock, timeout=HANG_S, connect_timeout=HANG_S) as loader:
                for b in loader:
                    got.append((b.epoch, b.step, len(b)))
                    b.release()
        except BaseException as e:  # reported below
            err.append(e)
        finally:
            progress.set()

    t = threading.Thread(target=trainer, daemon=True)
    proc = None
    try:
        t.start()
        assert progress.wait(HANG_S), "the trainer neither waited nor ended"
        assert not err, f"a trainer started before its node: {err[0]!r}"
        assert any(sock in m for m in handler.messages), handler.messages
        proc = launch(server_bin, tiny_dataset[0], feed_dir)
        t.join(HANG_S)
        assert not t.is_alive(), "the trainer did not finish its epoch"
        assert not err, f"a trainer started before its node: {err[0]!r}"
        assert got == [(0, k, 8) for k in range(240 // 8)]
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
        if proc is not None:
            stop(proc)


def test_no_node_clear_error(tmp_path, monkeypatch):
    """With no node, the loader gives up after its connect timeout with an
    error naming the socket path and what it tried."""
    sock = str(tmp_path / "rank-5.sock")
    with pytest.raises(longshore.ConnectTimeout) as ei:
        longshore.Loader(sock, connect_timeout=0.05).welcome
    e = ei.value
    assert e.path == sock and sock in str(e) and e.attempts >= 1
    assert isinstance(e.__cause__, FileNotFoundError)
    assert isinstance(e, longshore.FeedError) and e.code == "connect"
    assert isinstance(e, TimeoutError)  # an OSError, as the connect's own errors were
    # the environment sets the default; 0 is one attempt
    monkeypatch.setenv("LONGSHORE_CONNECT_TIMEOUT", "0")
    with pytest.raises(longshore.ConnectTimeout) as ei:
        longshore.Loader(sock).welcome
    assert ei.value.attempts == 1
    # a refusing socket (a killed node's) is named the same way
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(sock)
    dead.close()
    with pytest.raises(longshore.ConnectTimeout) as ei:
        longshore.Loader(sock, connect_timeout=0.05).welcome
    assert isinstance(ei.value.__cause__, ConnectionRefusedError) and sock in str(ei.value)
    monkeypatch.setenv("LONGSHORE_CONNECT_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="LONGSHORE_CONNECT_TIMEOUT"):
        longshore.Loader(sock)
