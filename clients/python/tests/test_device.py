"""The client's side of GPU delivery, against a scripted node and a fake
of the device seam (fakecuda.py): pinned regions, device regions opened
and closed over CUDA IPC, batches as __cuda_array_interface__ objects,
and releases held back until the device work reading the slot has run."""

import base64

import longshore
from fakecuda import FakeCuda
from fakenode import BATCH, BYE, DEVICE_REGION, HELLO, RELEASE, WELCOME, FakeNode, batch, send_region, welcome
from limits import HANG_S

UUID = "GPU-7717a000-0000-4000-8000-000000000000"
HANDLE = bytes(range(64))


def device_welcome(delivery):
    w = welcome()
    w.update(mode="standalone", delivery=delivery, device={"ordinal": 0, "uuid": UUID, "name": "twin"})
    return w


def host_batch(bid, step, offset=0, **extra):
    b = batch(bid, 0, step, era=0)
    b.update(region=1, offset=offset, nbytes=24, **extra)
    return b


def test_device_batches_over_ipc():
    pixels = bytes(range(256)) * 16
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, device_welcome("cuda_ipc")),
        lambda n: send_region(n, 1, pixels),
        ("send", DEVICE_REGION, {"region": 5, "device": {"ordinal": 0, "uuid": UUID}, "handle": base64.b64encode(HANDLE).decode(),
                                 "size": 1 << 20}),
        ("send", BATCH, host_batch(1, 0, device_region=5, device_offset=4096)),
        ("send", BATCH, host_batch(2, 1, offset=24, device_region=5, device_offset=8192)),
        ("expect", RELEASE),  # batch 1's
        ("expect", RELEASE),  # batch 2's: the client must wait for its gate to send it
        ("send", BATCH, host_batch(3, 2, device_region=5, device_offset=0)),
    ])
    cuda = FakeCuda()
    loader = longshore.Loader(node.path, timeout=HANG_S, device="cuda", cuda=cuda)
    assert loader.welcome["delivery"] == "cuda_ipc"
    b1 = loader.next_batch()
    opened = [e for e in cuda.log if e[0] == "ipc_open"]
    assert len(opened) == 1 and opened[0][1] == HANDLE and opened[0][2] == 0
    base = opened[0][3]
    assert b1.on_device
    cai = b1.device_array.__cuda_array_interface__
    assert cai["data"] == (base + 4096, False) and cai["shape"] == (2, 3, 2, 2) and cai["typestr"] == "|u1"
    assert cai["version"] == 3 and cai["stream"] is None
    assert b1.cuda() is b1.device_array  # the fake's as_tensor: the same memory, no copy
    assert bytes(b1.images.reshape(-1)) == pixels[:24]  # the host copy is there too

    # Releasing records an event on the current stream; the slot goes
    # back only once the event has completed.
    b1.release()
    ev = cuda.events[-1]
    c = loader._conn
    c.flush_releases()
    assert len(c.pending_release) == 1 and not ev.done
    ev.done = True
    c.flush_releases()
    assert not c.pending_release

    # A release still gated when the loader must read and nothing is
    # there: it waits for the oldest gate rather than for the node.
    b2 = loader.next_batch()
    b2.release()
    ev2 = cuda.events[-1]
    b3 = loader.next_batch()  # the node sends it only after batch 2's release
    assert ("synchronize", id(ev2)) in cuda.log
    assert b3.device_array.__cuda_array_interface__["data"][0] == base
    b3.release()  # gated; close waits for it, then sends it
    loader.close()
    node.join()
    hello = [p for t, p in node.received if t == HELLO][0]
    assert hello["device"] == "cuda"
    released = [i for t, p in node.received if t == RELEASE for i in p["ids"]]
    assert released[:2] == [1, 2] and 3 in released
    # The lifetime rule: every import closed before bye.
    assert not cuda.imports
    last_close = max(i for i, e in enumerate(cuda.log) if e[0] == "ipc_close")
    assert node.received[-1][0] == BYE and last_close > 0


def test_pinned_host_delivery():
    pixels = bytes(range(48))
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, device_welcome("host")),
        lambda n: send_region(n, 1, pixels),
        ("send", BATCH, host_batch(1, 0)),
        ("send", BATCH, host_batch(2, 1, offset=24)),
    ])
    cuda = FakeCuda()
    loader = longshore.Loader(node.path, timeout=HANG_S, pin_memory=True, cuda=cuda)
    b1 = loader.next_batch()
    regs = [e for e in cuda.log if e[0] == "host_register"]
    assert len(regs) == 1 and regs[0][2] == len(pixels)
    assert not b1.on_device
    x = b1.cuda()  # an async copy on the current stream
    assert bytes(x.reshape(-1)) == pixels[:24]
    assert cuda.log[-2] == ("to_device", 0, True)
    b1.release()
    c = loader._conn
    c.flush_releases()
    assert len(c.pending_release) == 1  # the copy may still read the slot
    cuda.events[-1].done = True
    c.flush_releases()
    assert not c.pending_release
    b2 = loader.next_batch()
    b2.release()  # no cuda(): released at once
    c.flush_releases()
    assert not c.pending_release
    loader.close()
    node.join()
    assert not cuda.registered  # unregistered at close
    assert [i for t, p in node.received if t == RELEASE for i in p["ids"]] == [1, 2]


def test_host_trainer_asks_nothing_of_cuda():
    node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome()), ("send", BATCH, batch(1, 0, 0, era=1))])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    b = loader.next_batch()
    assert not b.on_device and loader._conn.cuda is None
    loader.close()
    node.join()
    hello = [p for t, p in node.received if t == HELLO][0]
    assert "device" not in hello
