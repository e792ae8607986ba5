"""Samples of any dtype and shape (protocol v3) through the client, against
a scripted node: float32 audio [N,C,S] and uint8 video [N,T,3,H,W] arrive
as NumPy arrays and torch tensors of that dtype and shape over the shared
memory itself (no copy), with their short marks; an old image batch
(dims only) still reads as before."""

import numpy as np
import pytest
import torch  # imported before a fake node starts its timeouts

import longshore
from fakenode import BATCH, HELLO, WELCOME, FakeNode, send_region, welcome
from limits import HANG_S


def spec_welcome(kind, dtype, shape, layout):
    w = welcome()
    w.update(version=3, mode="standalone", dtype=dtype, layout=layout,
             spec={"kind": kind, "dtype": dtype, "shape": shape, "layout": layout})
    return w


def spec_batch(bid, shape, dtype, layout, nbytes, offset=0, short=None):
    n = shape[0]
    keys = [f"k{bid}-{i}" for i in range(n)]
    d = {"id": bid, "region": 1, "offset": offset, "nbytes": nbytes, "dims": [0, 0, 0, 0], "shape": shape,
         "layout": layout, "dtype": dtype, "epoch": 0, "step": bid, "labels": [0] * n, "keys": keys,
         "indices": list(range(n)), "positions": list(range(n)), "pads": [False] * n, "failed": 0}
    if short is not None:
        d["short"] = short
    return d


def test_float32_audio_zero_copy():
    wave = np.arange(2 * 2 * 5, dtype=np.float32) / 4  # [N=2, C=2, S=5]
    region = wave.tobytes() + b"\0" * 64
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, spec_welcome("audio", "float32", [2, 5], "NCS")),
        lambda n: send_region(n, 1, region),
        ("send", BATCH, spec_batch(1, [2, 2, 5], "float32", "NCS", wave.nbytes, short=[False, True])),
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    assert loader.welcome["spec"]["kind"] == "audio"
    b = loader.next_batch()
    assert b.images.dtype == np.float32 and b.images.shape == (2, 2, 5) and b.layout == "NCS"
    np.testing.assert_array_equal(b.images, wave.reshape(2, 2, 5))
    assert b.short == [False, True]
    t = b.tensor()
    assert t.dtype == torch.float32 and tuple(t.shape) == (2, 2, 5)
    # zero copy: the tensor and the array are the shared mapping; a write
    # through one shows in the other
    assert t.data_ptr() == b.images.ctypes.data
    assert not b.images.flags.owndata
    hello = node.received[0][1]
    assert hello["version"] == 4
    del t
    b.release()
    loader.close()
    node.join()


def test_uint8_video_and_old_image_batches():
    clip = np.random.default_rng(1).integers(0, 256, size=(1, 3, 3, 2, 2), dtype=np.uint8)  # [N,T,3,H,W]
    img = np.arange(1 * 3 * 2 * 2, dtype=np.uint8)
    region = clip.tobytes() + img.tobytes()
    old = spec_batch(2, [1, 3, 2, 2], "uint8", "NCHW", img.nbytes, offset=clip.nbytes)
    del old["shape"]  # a version-2 image descriptor: dims only
    old["dims"] = [1, 3, 2, 2]
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, spec_welcome("video", "uint8", [3, 3, 2, 2], "NTCHW")),
        lambda n: send_region(n, 1, region),
        ("send", BATCH, spec_batch(1, [1, 3, 3, 2, 2], "uint8", "NTCHW", clip.nbytes, short=[True])),
        ("send", BATCH, old),
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    b = loader.next_batch()
    assert b.images.shape == (1, 3, 3, 2, 2) and b.images.dtype == np.uint8 and b.short == [True]
    np.testing.assert_array_equal(b.images, clip)
    b.release()
    b = loader.next_batch()
    assert b.images.shape == (1, 3, 2, 2) and b.short == [False]
    np.testing.assert_array_equal(b.images.ravel(), img)
    b.release()
    loader.close()
    node.join()


def test_inconsistent_descriptor_is_a_protocol_error():
    node = FakeNode([
        ("expect", HELLO),
        ("send", WELCOME, spec_welcome("audio", "float32", [1, 4], "NCS")),
        lambda n: send_region(n, 1, b"\0" * 64),
        ("send", BATCH, spec_batch(1, [2, 1, 4], "float32", "NCS", 16)),  # 2x1x4 float32 is 32 bytes
    ])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    with pytest.raises(longshore.FeedError) as ei:
        loader.next_batch()
    assert ei.value.code == "protocol"
    loader.close()
    node.join()
