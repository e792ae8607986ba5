"""Raw samples end to end (--media raw): an ImageFolder of text files (and
a binary one) served by longshore-node --standalone --sink feed and read
by the Python client: every sample's bytes, as batch["data"] (memoryviews
of the shared memory), equal its file's, exactly once an epoch across two
epochs and a trainer that dies mid-epoch and resumes from its
checkpoint's token."""

import json
import re

import longshore
from limits import HANG_S

N, EPOCHS, BATCH, MAX = 50, 2, 8, 4096


def content(i):
    if i == 0:
        return b""  # an empty file is a sample of no bytes
    if i == 1:
        return bytes(range(256)) * 3  # not text: bytes as they are
    return f"document {i}\n".encode() + b"lorem ipsum " * (i * 7 % 300)


def write_folder(root):
    files = {}
    for i in range(N):
        key = f"c{i % 3}/doc{i:03d}." + ("bin" if i == 1 else "txt")
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(content(i))
        files[key] = content(i)
    assert max(map(len, files.values())) <= MAX
    return files


def test_raw_bytes_exactly_once_across_epochs_and_a_resume(start_node, tmp_path):
    files = write_folder(tmp_path / "docs")
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", tmp_path / "docs", "--media", "raw", "--raw-max-bytes", MAX, "--batch-size", BATCH,
                       "--epochs", EPOCHS, "--seed", 5, "--progress", "never"], feed)
    committed = {}  # (epoch, key) -> deliveries in committed history
    sock = node.socket()

    def read(loader, stop_after=None):
        """Read batches, counting each row; stop (without committing
        the rest) after `stop_after` batches of epoch 1."""
        pending, state, seen1 = {}, None, 0
        for b in loader.batches():
            spec = loader.welcome["spec"]
            assert spec["kind"] == "raw" and spec["dtype"] == "uint8" and spec["shape"] == [MAX + 8], spec
            data = b["data"]
            assert data is b.data and data is b.fields["data"] and len(data) == len(b)
            for r, key in enumerate(b.keys):
                assert isinstance(data[r], memoryview)
                assert bytes(data[r]) == files[key], (key, len(data[r]), len(files[key]))
                assert not b.filled[r]
                pending[(b.epoch, key)] = pending.get((b.epoch, key), 0) + 1
            del data
            b.release()
            if b.epoch == 1:
                seen1 += 1
                if stop_after is not None and seen1 == stop_after:
                    # checkpoint here, then read two batches more and die
                    state = loader.state_dict()
                    for k, v in pending.items():
                        committed[k] = committed.get(k, 0) + v
                    pending.clear()
                    extra = 0
                    for b2 in loader:
                        b2.release()
                        extra += 1
                        if extra == 2:
                            break
                    assert extra == 2
                    return state
        for k, v in pending.items():
            committed[k] = committed.get(k, 0) + v
        return state

    first = longshore.Loader(sock, timeout=HANG_S)
    state = read(first, stop_after=2)
    first.close()  # the trainer dies two batches after its checkpoint
    assert state is not None and state["epoch"] == 1 and state["step"] == 1, state

    second = longshore.Loader(sock, timeout=HANG_S)
    second.load_state_dict(state)
    assert second.welcome["resume"] == {"epoch": 1, "step": 2}, second.welcome["resume"]
    read(second)
    second.close()
    assert node.wait() == 0, node.stderr
    want = {(e, k) for e in range(EPOCHS) for k in files}
    assert set(committed) == want and set(committed.values()) == {1}, "every sample exactly once an epoch"


def test_raw_sample_too_large_is_a_failure(start_node, tmp_path):
    """A sample longer than --raw-max-bytes fails (too_large): its row is
    filled with another row's bytes and marked, the others arrive whole."""
    files = write_folder(tmp_path / "docs")
    big = b"x" * (MAX + 1)
    (tmp_path / "docs" / "c0" / "big.txt").write_bytes(big)
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", tmp_path / "docs", "--media", "raw", "--raw-max-bytes", MAX, "--batch-size", BATCH,
                       "--max-failures", 5, "--progress", "never"], feed)
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S)
    delivered, filled = set(), 0
    for b in loader.batches():
        for r, key in enumerate(b.keys):
            if b.filled[r]:
                filled += 1
                continue
            assert bytes(b["data"][r]) == files[key]
            delivered.add(key)
        b.release()
    loader.close()
    node.wait()
    assert delivered == set(files) and filled == 1


def test_raw_bytes_in_cluster_mode(start_cluster, tmp_path):
    """The same through a coordinator and a node (--join ... --sink feed,
    both --media raw): every sample's bytes, exactly once per epoch in
    committed history (the trainer commits every batch)."""
    files = write_folder(tmp_path / "docs")
    c = start_cluster(dataset=str(tmp_path / "docs"), workdir=tmp_path / "cluster", epochs=EPOCHS, batch=BATCH,
                      extra_node=("--media", "raw", "--raw-max-bytes", str(MAX)), extra_coord=("--media", "raw"))
    seen = {}
    loader = longshore.Loader(c.socket(), timeout=HANG_S)
    for b in loader.batches():
        assert loader.welcome["spec"]["kind"] == "raw"
        for r, key in enumerate(b.keys):
            if b.filled[r] or b.pads[r]:
                continue
            assert bytes(b["data"][r]) == files[key], key
            seen[(b.epoch, key)] = seen.get((b.epoch, key), 0) + 1
        b.release()
        loader.commit()
    loader.close()
    assert c.node.wait(HANG_S) == 0, c.logs()
    assert c.coord.wait(HANG_S) == 0, c.logs()
    want = {(e, k) for e in range(EPOCHS) for k in files}
    assert set(seen) == want and set(seen.values()) == {1}, c.logs()


def test_raw_with_a_manifest_and_fields(start_node, tmp_path):
    """A manifest's objects read raw, with their fields: a field named
    "data" keeps its name in batch.fields and batch["data"], the bytes are
    then batch.data."""
    files = write_folder(tmp_path / "docs")
    keys = sorted(files)
    with open(tmp_path / "docs" / "manifest.jsonl", "w") as f:
        for i, key in enumerate(keys):
            f.write(json.dumps({"key": key, "label": i % 2, "data": f"meta {i}", "n": i}) + "\n")
    feed = str(tmp_path / "feed")
    node = start_node(["--dataset", tmp_path / "docs", "--media", "raw", "--raw-max-bytes", MAX, "--batch-size", BATCH,
                       "--progress", "never"], feed)
    seen = set()
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S)
    for b in loader.batches():
        for r, key in enumerate(b.keys):
            i = keys.index(key)
            assert bytes(b.data[r]) == files[key]
            assert b["data"][r] == b.fields["data"][r] == f"meta {i}" and int(b["n"][r]) == i
            assert int(b["label"][r]) == i % 2
            seen.add(key)
        b.release()
    loader.close()
    assert node.wait() == 0, node.stderr
    assert seen == set(files)


def test_raw_webdataset_text_with_metadata(start_node, tmp_path):
    """WebDataset tars of text as they are (--dataset naming the tars'
    directory): with --media raw:txt each sample's .txt member is its
    data, its .json member its fields; plain --media raw refuses samples
    of two members, asking which is the data. Every document once an
    epoch, its metadata beside it."""
    import io
    import tarfile

    root = tmp_path / "shards"
    root.mkdir()
    docs = {}
    for shard in range(2):
        with tarfile.open(root / f"shard-{shard}.tar", "w") as tf:
            for k in range(10):
                i = shard * 10 + k
                text = f"document {i}: ".encode() + "héllo wörld ".encode() * i
                meta = json.dumps({"n": i, "lang": "de" if i % 2 else "en"}).encode()
                for ext, body in (("txt", text), ("json", meta)):
                    info = tarfile.TarInfo(f"d{i:03d}.{ext}")
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
                docs[f"shard-{shard}.tar/d{i:03d}.txt"] = (text, i)
    feed = str(tmp_path / "feed")

    refused = start_node(["--dataset", root, "--media", "raw", "--raw-max-bytes", MAX, "--progress", "never"],
                         feed + "-plain")
    assert refused.wait() != 0
    # the tars are indexed concurrently: whichever sample is refused first
    # is named, with both its members
    assert "--media raw:EXT" in refused.stderr, refused.stderr
    assert re.search(r'sample "d0(\d\d)" has 2 members \(d0\1\.txt, d0\1\.json', refused.stderr), refused.stderr

    node = start_node(["--dataset", root, "--media", "raw:txt", "--raw-max-bytes", MAX, "--batch-size", BATCH,
                       "--epochs", EPOCHS, "--seed", 3, "--progress", "never"], feed)
    loader = longshore.Loader(node.socket(), timeout=HANG_S)
    seen = {}
    for b in loader.batches():
        for r, key in enumerate(b.keys):
            rel = key.split(str(root) + "/", 1)[-1]
            text, i = docs[rel]
            assert bytes(b["data"][r]) == text, rel
            assert b.fields["json.n"][r] == i and b.fields["json.lang"][r] == ("de" if i % 2 else "en"), rel
            seen[(b.epoch, rel)] = seen.get((b.epoch, rel), 0) + 1
        b.release()
    loader.close()
    assert node.wait() == 0, node.stderr
    assert seen == {(e, k): 1 for e in range(EPOCHS) for k in docs}, "every document exactly once an epoch"
