"""The loader as training frameworks use a DataLoader: len() (steps this
epoch for this rank, from the welcome), the rank from the launcher's
environment, Batch.to(device)."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import longshore
from fakenode import HELLO, WELCOME, FakeNode, welcome
from limits import HANG_S
from tinynode import launch, stop

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture
def node2(server_bin, tiny_dataset, tmp_path):
    """A feed_server over the 240 tiny images, 2 ranks (120 samples each),
    batches of 16 (8 steps an epoch, the last of 8 samples), 2 epochs."""
    feed_dir = str(tmp_path / "feed")
    proc = launch(server_bin, tiny_dataset[0], feed_dir, ranks=2, batch_size=16, epochs=2)
    yield feed_dir
    stop(proc)


def test_len_and_rank_from_slurm(node2, monkeypatch):
    """Under plain srun (SLURM_LOCALID, no LOCAL_RANK) the loader takes its
    rank from Slurm; len() is the rank's steps per epoch, as delivered."""
    monkeypatch.setenv("LONGSHORE_FEED_DIR", node2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("SLURM_LOCALID", "1")
    with longshore.Loader(timeout=HANG_S, connect_timeout=HANG_S) as loader:
        assert loader.path == os.path.join(node2, "rank-1.sock")
        assert loader.rank == 1
        assert len(loader) == 8
        assert loader.welcome["rank"] == 1 and loader.welcome["epoch_steps"] == 8
        for epoch in range(2):
            sizes = []
            for b in loader:
                assert b.epoch == epoch
                sizes.append(len(b))
                b.release()
            assert sizes == [16] * 7 + [8]
            assert len(sizes) == len(loader)


def test_rank_sources(monkeypatch, tmp_path):
    """An explicit rank wins, then LOCAL_RANK, then SLURM_LOCALID, then 0."""
    d = str(tmp_path)
    monkeypatch.setenv("LONGSHORE_FEED_DIR", d)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    assert longshore.socket_path() == os.path.join(d, "rank-0.sock")
    monkeypatch.setenv("SLURM_LOCALID", "3")
    assert longshore.socket_path() == os.path.join(d, "rank-3.sock")
    assert longshore.Loader().rank == 3
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert longshore.socket_path() == os.path.join(d, "rank-2.sock")
    assert longshore.Loader().path == os.path.join(d, "rank-2.sock")
    assert longshore.socket_path(5) == os.path.join(d, "rank-5.sock")
    assert longshore.Loader(5).rank == 5
    assert longshore.Loader(rank=6).path == os.path.join(d, "rank-6.sock")
    assert longshore.Loader(os.path.join(d, "x.sock")).rank is None  # a path: no rank claimed
    named = longshore.Loader(os.path.join(d, "x.sock"), rank=1)  # a path, and the rank it serves
    assert (named.path, named.rank) == (os.path.join(d, "x.sock"), 1)
    with pytest.raises(ValueError, match="rank"):
        longshore.Loader(5, rank=6)
    monkeypatch.setenv("LOCAL_RANK", "two")
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        longshore.socket_path()


def test_rank_is_said_in_the_hello(monkeypatch):
    """A loader that chose its socket by rank says the rank in its hello
    (the node refuses a trainer at another rank's socket)."""
    node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome())])
    monkeypatch.setenv("LONGSHORE_FEED_DIR", node.dir)
    monkeypatch.setenv("LOCAL_RANK", "0")
    with longshore.Loader(timeout=HANG_S) as loader:
        loader.welcome
    node.join()
    assert node.last[HELLO]["rank"] == 0


def test_len_unknown():
    """A node that does not say its epoch's steps (cluster mode, an older
    node): len() raises TypeError, as for any unsized iterable, so
    frameworks treat the loader as unsized."""
    node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome())])
    with longshore.Loader(node.path, timeout=HANG_S) as loader:
        with pytest.raises(TypeError, match="epoch"):
            len(loader)
    node.join()


def test_batch_to(node2):
    """Batch.to(device, non_blocking=...) as Lightning and Accelerate call
    it: torch tensors on the device (on the CPU, the shared memory itself),
    the batch's fields kept, the slot released through it."""
    import torch

    with longshore.Loader(os.path.join(node2, "rank-0.sock"), timeout=HANG_S, connect_timeout=HANG_S) as loader:
        b = next(iter(loader))
        m = b.to(torch.device("cpu"), non_blocking=True)
        assert isinstance(m.images, torch.Tensor) and m.images.dtype == torch.uint8
        assert tuple(m.images.shape) == (16, 3, 16, 16)
        assert m.images.data_ptr() == b.images.__array_interface__["data"][0]  # no copy
        assert isinstance(m.labels, torch.Tensor) and m.labels.dtype == torch.int64
        assert m.labels.tolist() == b.labels.tolist()
        assert (m.epoch, m.step, m.keys, m.layout, len(m)) == (b.epoch, b.step, b.keys, b.layout, 16)
        assert m.device == torch.device("cpu") and m.batch is b
        assert m.to("cpu").images.data_ptr() == m.images.data_ptr()
        assert m.labels.device.type == "cpu"
        m.release()
        assert b.id in [i for i, _ in loader._conn.pending_release]


def test_typed():
    """The package says it is typed (PEP 561) and its public API is annotated."""
    pkg = REPO / "clients" / "python" / "longshore"
    assert (pkg / "py.typed").exists()
    import inspect

    for f in (longshore.Loader.__init__, longshore.Loader.__len__, longshore.Loader.commit,
              longshore.Loader.state_dict, longshore.Loader.next_batch, longshore.Batch.to,
              longshore.Batch.tensor, longshore.Batch.cuda, longshore.socket_path):
        sig = inspect.signature(f)
        assert sig.return_annotation is not inspect.Signature.empty, f
        for name, p in sig.parameters.items():
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                assert p.annotation is not inspect.Parameter.empty, (f, name)


def test_lightning_example_plain(server_bin, tiny_dataset, tmp_path):
    """examples/lightning_train.py, run as plain PyTorch (Lightning is not
    installed here): the data module and steps it gives Lightning, driven
    by a loop that does what Lightning's fit loop does with them."""
    feed_dir = str(tmp_path / "feed")
    proc = launch(server_bin, tiny_dataset[0], feed_dir, ranks=1, batch_size=16, epochs=2)
    try:
        env = dict(os.environ, LONGSHORE_FEED_DIR=feed_dir, LOCAL_RANK="0",
                   PYTHONPATH=str(REPO / "clients" / "python"))
        out = subprocess.run([sys.executable, str(REPO / "examples" / "lightning_train.py"), "--no-lightning",
                              "--epochs", "2", "--num-classes", "3", "--ckpt", str(tmp_path / "ckpt.pt")],
                             env=env, capture_output=True, text=True, timeout=HANG_S)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert "steps per epoch: 15" in lines, out.stdout  # 240 / 16
        assert "epoch 0: 15 steps" in lines and "epoch 1: 15 steps" in lines, out.stdout
        ck = __import__("torch").load(str(tmp_path / "ckpt.pt"))
        assert ck["datamodule"]["epoch"] == 1 and ck["datamodule"]["step"] == 14, ck["datamodule"]
    finally:
        stop(proc)
    assert np.isfinite(float(lines[-1].split()[-1]))
