"""A scripted stand-in for a cluster-mode node speaking the feed protocol
(docs/feed-protocol.md) on a Unix socket, for tests of the client's side
of rollbacks without a cluster."""

import json
import os
import socket
import struct
import tempfile
import threading
from limits import HANG_S

HELLO, RELEASE, COMMIT, BYE = 1, 2, 3, 4
WELCOME, REGION, BATCH, COMMITTED, EPOCH_END, END, ERROR, ROLLBACK = 16, 17, 18, 19, 20, 21, 22, 23
DEVICE_REGION = 24


class FakeNode:
    """Serves one connection. `script` is a list of steps run in order on
    the server's thread:

        ("send", type, payload)     send a message
        ("expect", type)            read messages (releases skipped) until one of type
        ("accept",)                 close the connection and serve the next one
        callable(node)              anything else (its result is ignored)

    Then it reads until the client says bye or closes. Messages received
    are in `received` as (type, payload)."""

    def __init__(self, script):
        self.dir = tempfile.mkdtemp(prefix="lsfake")
        self.path = os.path.join(self.dir, "rank-0.sock")
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lsock.bind(self.path)
        self.lsock.listen(1)
        self.script = script
        self.received = []
        self.error = None
        self.last = {}  # type -> last payload received of it
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.conn, _ = self.lsock.accept()
            self.conn.settimeout(HANG_S)
            for step in self.script:
                if callable(step):
                    step(self)
                elif step[0] == "send":
                    self.send(step[1], step[2])
                elif step[0] == "expect":
                    self.expect(step[1])
                elif step[0] == "accept":
                    self.conn.close()
                    self.conn, _ = self.lsock.accept()
                    self.conn.settimeout(HANG_S)
            try:  # then read what the client still says, until it closes
                self.expect(BYE)
            except EOFError:
                pass
            self.conn.close()
        except Exception as e:  # reported by join()
            self.error = e

    def send(self, t, obj):
        body = json.dumps(obj).encode()
        self.conn.sendall(struct.pack("<I", len(body) + 1) + bytes([t]) + body)

    def _recv(self, n):
        b = b""
        while len(b) < n:
            chunk = self.conn.recv(n - len(b))
            if not chunk:
                raise EOFError("client closed")
            b += chunk
        return b

    def expect(self, want):
        while True:
            (n,) = struct.unpack("<I", self._recv(4))
            body = self._recv(n)
            t, payload = body[0], json.loads(body[1:]) if n > 1 else {}
            self.received.append((t, payload))
            self.last[t] = payload
            if t == want:
                return payload
            if t != RELEASE and want != BYE:
                raise AssertionError(f"fake node: expected message type {want}, got {t} {payload}")

    def join(self, timeout=HANG_S):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "fake node script did not finish"
        self.lsock.close()
        if self.error:
            raise self.error


def welcome(era=1, committed=None, resume=(0, 0)):
    w = {"version": 2, "job": "j", "rank": 0, "batch_size": 2, "slots": 4, "slot_bytes": 24,
         "sample": {"height": 2, "width": 2, "channels": 3}, "layout": "NCHW", "dtype": "uint8",
         "resume": {"epoch": resume[0], "step": resume[1]}, "mode": "cluster", "era": era}
    if committed:
        w["committed"] = committed
    return w


def batch(bid, epoch, step, era, keys=None, end_of_stream=False):
    keys = keys or [f"k{epoch}-{step}-a", f"k{epoch}-{step}-b"]
    return {"id": bid, "region": 0, "offset": 0, "nbytes": 0, "dims": [len(keys), 3, 2, 2], "layout": "NCHW",
            "dtype": "uint8", "epoch": epoch, "step": step, "labels": [0] * len(keys), "keys": keys,
            "indices": list(range(len(keys))), "positions": list(range(len(keys))), "pads": [False] * len(keys),
            "failed": 0, "era": era, "end_of_stream": end_of_stream}


def send_region(node, region, data):
    """A region message carrying a memfd holding data (what the node's
    ShmAllocator passes)."""
    fd = os.memfd_create("lsfake")
    try:
        os.write(fd, data)
        body = json.dumps({"region": region, "size": len(data)}).encode()
        frame = struct.pack("<I", len(body) + 1) + bytes([REGION]) + body
        socket.send_fds(node.conn, [frame], [fd])
    finally:
        os.close(fd)
