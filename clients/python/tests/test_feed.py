import ctypes
import gc
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import zlib

import numpy as np
import pytest

import longshore
from limits import HANG_S


def region_bounds(loader):
    out = []
    for mm in loader._conn.regions.values():
        base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        out.append((base, base + len(mm)))
    return out


def inside(addr, n, bounds):
    return any(lo <= addr and addr + n <= hi for lo, hi in bounds)


def crcs(images):
    return [zlib.crc32(images[i]) for i in range(images.shape[0])]  # buffer protocol: no copy


def test_zero_copy_and_content(start_server):
    srv = start_server(checksums=True, epochs=2)
    want = srv.sums()
    got = {}
    loader = longshore.Loader(srv.socket(), timeout=HANG_S)
    assert loader.welcome["sample"] == {"height": 64, "width": 64, "channels": 3}
    # epoch 0: every batch lies in the shared mapping, pixels equal the Go pipeline's
    for b in loader:
        img = b.images
        assert img.dtype == np.uint8 and img.shape == (len(b), 3, 64, 64)
        addr = img.__array_interface__["data"][0]
        assert inside(addr, img.nbytes, region_bounds(loader)), "images not in the shared mapping"
        assert not img.flags.owndata
        assert isinstance(img.base, np.ndarray) and isinstance(img.base.base, memoryview)
        assert b.id not in [i for i, _ in loader._conn.pending_release]  # alive: not released
        for i, c in enumerate(crcs(img)):
            got[(0, b.epoch, b.step, i)] = (c, b.keys[i])
        del img, b
    assert got == {k: v for k, v in want.items() if k[1] == 0}
    # epoch 1: still identical, and no pixel memory is allocated per batch
    per_batch = 16 * 3 * 64 * 64
    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    n = 0
    for b in loader:
        for i, c in enumerate(crcs(b.images)):
            assert want[(0, b.epoch, b.step, i)][0] == c
        n += 1
        del b
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert n == max(k[2] for k in want) + 1
    # descriptors only: a copy of the pixels would be >= per_batch
    assert peak - base < per_batch // 4, f"peak traced growth {peak - base} bytes"
    assert loader.next_batch() is None and loader.ended


def test_torch_view(start_server):
    import torch  # CI installs python3-torch: this test must run there

    srv = start_server()
    loader = longshore.Loader(srv.socket(), timeout=HANG_S)
    b = loader.next_batch()
    t = b.tensor()
    assert t.dtype == torch.uint8 and tuple(t.shape) == b.images.shape
    assert inside(t.data_ptr(), t.numel(), region_bounds(loader))
    assert t.float().mean().item() == pytest.approx(b.images.mean(), rel=1e-5)
    # the tensor keeps the slot: drop the batch and the array, keep the tensor
    bid = b.id
    del b
    gc.collect()
    assert bid not in [i for i, _ in loader._conn.pending_release]
    del t
    gc.collect()
    assert bid in [i for i, _ in loader._conn.pending_release]
    loader.close()


def test_release_on_drop_and_torchrun_env(start_server, monkeypatch):
    srv = start_server(slots=2)
    monkeypatch.setenv("LONGSHORE_FEED_DIR", srv.dir)
    monkeypatch.setenv("LOCAL_RANK", "0")
    loader = longshore.Loader(timeout=HANG_S)  # socket from the environment
    n = 0
    for b in loader:  # never released explicitly: dropped each iteration
        n += 1
        if n == 12:
            break
    assert n == 12  # with 2 slots this needs the dropped batches released
    loader.close()


def test_kill9_resume(start_server):
    srv = start_server(checksums=True)
    want = srv.sums()
    tok_path = os.path.join(srv.dir, "token")
    here = os.path.dirname(__file__)
    p = subprocess.Popen([sys.executable, os.path.join(here, "trainer_proc.py"), "--socket", srv.socket(),
                          "--commit-at", "5", "--stop-at", "9", "--token-out", tok_path],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert srv.alive()
    token = open(tok_path, "rb").read()

    def check_resumed(loader):
        b = loader.next_batch()
        assert (b.epoch, b.step) == (0, 6), (b.epoch, b.step)
        for i, c in enumerate(crcs(b.images)):
            assert (c, b.keys[i]) == want[(0, 0, 6, i)]
        return b

    # a restarted trainer without a token resumes after the node's last commit
    loader = longshore.Loader(srv.socket(), timeout=HANG_S)
    assert loader.welcome["resume"] == {"epoch": 0, "step": 6}
    check_resumed(loader)
    for _ in range(3):
        loader.next_batch()
    sd = loader.state_dict()
    assert (sd["epoch"], sd["step"]) == (0, 9)
    loader.close()
    # and a trainer restoring the older checkpoint gets the older cursor back
    loader = longshore.Loader(srv.socket(), timeout=HANG_S)
    loader.load_state_dict({"token": token})
    check_resumed(loader)
    # then the rest of the epoch, exactly once
    seen = {(0, 6)}
    for b in loader:
        seen.add((b.epoch, b.step))
    steps = max(k[2] for k in want) + 1
    assert seen == {(0, s) for s in range(6, steps)}
    loader.close()
    assert srv.alive()


def test_hostile_bytes_get_error_and_close(start_server):
    srv = start_server()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(srv.socket())
    s.sendall(struct.pack("<I", 1 << 30) + b"\x01")
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    assert data[4] == 22 and b'"code":"protocol"' in data
    # the node is fine
    loader = longshore.Loader(srv.socket(), timeout=HANG_S)
    assert loader.next_batch() is not None
    loader.close()
    assert srv.alive()
