"""Fixed batch shapes: a failed sample's place is filled by the node with
a copy of another sample of its batch, and the client exposes which rows
are filled (Batch.filled, and the bool tensors Batch.valid / mask, also
on TorchBatch)."""

import os

import numpy as np
import torch

import longshore
from limits import HANG_S
from tinynode import launch, stop


def test_failed_samples_filled_and_masked(server_bin, tiny_dataset, tmp_path):
    root, keys = tiny_dataset
    bad = ["c0/bad1.jpg", "c1/bad2.jpg"]
    with open(os.path.join(root, bad[0]), "wb") as f:
        f.write(b"not an image")
    with open(os.path.join(root, bad[1]), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 truncated")
    feed_dir = str(tmp_path / "feed")
    proc = launch(server_bin, root, feed_dir, ranks=1, batch_size=16, epochs=1)
    try:
        with longshore.Loader(os.path.join(feed_dir, "rank-0.sock"), timeout=HANG_S, connect_timeout=HANG_S) as loader:
            sizes, seen, filled, failed = [], {}, 0, 0
            for b in loader:
                n = len(b)
                sizes.append(n)
                valid = b.valid
                assert valid.dtype == torch.bool and valid.shape == (n,)
                assert torch.equal(b.mask, valid)
                assert valid.tolist() == [not f for f in b.filled]
                for j in range(n):
                    if b.filled[j]:
                        src = j  # the next unfilled row, wrapping
                        while b.filled[src]:
                            src = (src + 1) % n
                        assert np.array_equal(b.images[j], b.images[src])
                        assert b.keys[j] == b.keys[src] and b.labels[j] == b.labels[src]
                    else:
                        seen[b.keys[j]] = seen.get(b.keys[j], 0) + 1
                filled += sum(b.filled)
                failed += b.failed
                tb = b.to("cpu")
                assert torch.equal(tb.valid, valid) and torch.equal(tb.mask, valid) and tb.filled == b.filled
                assert torch.equal(tb.to("cpu").valid, valid)
                b.release()
            # 242 samples: 15 full batches and a last one of 2, which stays
            # short (only failures are filled; it may be empty if both failed)
            assert sizes[:-1] == [16] * 15 and sizes[-1] <= 2, sizes
            assert failed == 2 and filled <= 2
            assert seen == {k: 1 for k in keys}
    finally:
        stop(proc)
