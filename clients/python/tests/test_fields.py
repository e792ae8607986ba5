"""Samples with fields, end to end: a WebDataset made with Python's
tarfile (.jpg, .txt, .json and .cls members), indexed by longshore-pack
--index or read in place, served by longshore-node --standalone --sink feed and read by the
Python client: every caption, JSON member and label arrives with its own
sample (each names its key), every sample exactly once an epoch."""

import io
import json
import os
import subprocess
import tarfile

import pytest
import torch

import longshore
from conftest import REPO
from limits import HANG_S

N, SHARDS, EPOCHS = 60, 3, 2


@pytest.fixture(scope="session")
def pack_bin(tmp_path_factory):
    d = os.environ.get("LONGSHORE_BIN_DIR")
    if d:
        return os.path.join(d, "longshore-pack")
    out = str(tmp_path_factory.mktemp("packbin") / "longshore-pack")
    subprocess.run(["go", "build", "-o", out, "./cmd/longshore-pack"], cwd=REPO, check=True)
    return out


def stem(i):
    return f"s{i:04d}"


def write_webdataset(root):
    from PIL import Image

    root.mkdir(parents=True)
    for s in range(SHARDS):
        with tarfile.open(root / f"shard-{s:03d}.tar", "w") as tar:
            for i in range(s, N, SHARDS):
                px = bytes((i * 7 + p) % 256 for p in range(16 * 16 * 3))
                jpg = io.BytesIO()
                Image.frombytes("RGB", (16, 16), px).save(jpg, "JPEG")
                members = {"jpg": jpg.getvalue(), "cls": str(i % 4).encode(),
                           "json": json.dumps({"key": stem(i), "width": 16 + i, "tags": [stem(i), "x"]}).encode()}
                if i % 5:  # every 5th sample has no caption
                    members["txt"] = f"a photo of {stem(i)}".encode()
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{stem(i)}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("indexed", [True, False], ids=["indexed", "in_place"])
def test_webdataset_fields_through_the_feed(start_node, pack_bin, tmp_path, indexed):
    """indexed: longshore-pack --index wrote manifest.jsonl beside the
    tars; in_place: the directory of tars is --dataset as it is."""
    root = tmp_path / "wds"
    write_webdataset(root)
    if indexed:
        subprocess.run([pack_bin, "--index", str(root)], check=True, capture_output=True)
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", root, "--size", 16, "--transform", "resize", "--batch-size", 8, "--epochs", EPOCHS,
                       "--progress", "never"], feed)
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S)
    schema = {f["name"]: f["type"] for f in loader.welcome["fields"]}
    assert schema == {"txt": "string", "json.key": "string", "json.width": "int", "json.tags": "list<string>"}
    seen = {}
    for b in loader.batches():
        assert b["image"].shape == (len(b), 3, 16, 16)
        assert isinstance(b["json.width"], torch.Tensor) and b["json.width"].dtype == torch.int64
        labels = b["label"]
        for r, key in enumerate(b.keys):
            if b.filled[r]:
                continue
            i = int(key.split("/")[-1][1:5])
            assert key == f"shard-{i % SHARDS:03d}.tar/{stem(i)}.jpg"
            assert b["json.key"][r] == stem(i), (key, b["json.key"][r])
            assert int(b["json.width"][r]) == 16 + i
            assert b["json.tags"][r] == [stem(i), "x"]
            assert int(labels[r]) == i % 4
            if i % 5:
                assert b.fields["txt"][r] == f"a photo of {stem(i)}" and b.present["txt"][r]
            else:
                assert b.fields["txt"][r] is None and not b.present["txt"][r]
            seen[(b.epoch, key)] = seen.get((b.epoch, key), 0) + 1
        b.release()
    loader.close()
    assert node.wait() == 0, node.stderr
    assert len(seen) == N * EPOCHS and set(seen.values()) == {1}, "every sample exactly once an epoch"


def test_no_fields_asked(start_node, pack_bin, tmp_path):
    """Loader(fields=False) says nothing of fields: the batches are what
    they were before fields existed."""
    root = tmp_path / "wds"
    write_webdataset(root)
    subprocess.run([pack_bin, "--index", str(root)], check=True, capture_output=True)
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", root, "--size", 16, "--transform", "resize", "--batch-size", 8,
                       "--progress", "never"], feed)
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S, fields=False)
    assert "fields" not in loader.welcome
    n = 0
    for b in loader.batches():
        assert b.fields == {} and "txt" not in b
        n += len(b)
        b.release()
    loader.close()
    assert n == N
    assert node.wait() == 0, node.stderr
