"""The trainer checks who serves its socket: a process of another user
(not the trainer's own, root, or one named in $LONGSHORE_NODE_UID) is
refused, so that whoever can write to the feed directory cannot serve a
trainer data of their own. Starting a server as another user needs root."""

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import longshore
from longshore._feed import _connect_unix

NOBODY = 65534

SERVER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(8)
print("ready", flush=True)
held = []
while True:
    c, _ = s.accept(); held.append(c)
"""


@pytest.mark.skipif(os.getuid() != 0, reason="serving a socket as another user needs root")
def test_node_of_another_user_refused(monkeypatch):
    d = tempfile.mkdtemp(prefix="lsfpeer")  # pytest's tmp_path is private to root
    os.chmod(d, 0o777)
    path = os.path.join(d, "rank-0.sock")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, path], user=NOBODY, group=NOBODY,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        monkeypatch.delenv("LONGSHORE_NODE_UID", raising=False)
        with pytest.raises(longshore.NodeRefused) as e:
            _connect_unix(path, 5.0, 0)
        assert e.value.uid == NOBODY and path in str(e.value) and "LONGSHORE_NODE_UID=65534" in str(e.value)
        monkeypatch.setenv("LONGSHORE_NODE_UID", str(NOBODY))
        _connect_unix(path, 5.0, 0).close()
        monkeypatch.setenv("LONGSHORE_NODE_UID", "any")
        _connect_unix(path, 5.0, 0).close()
        monkeypatch.setenv("LONGSHORE_NODE_UID", "nobody")
        with pytest.raises(ValueError):
            _connect_unix(path, 5.0, 0)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)
