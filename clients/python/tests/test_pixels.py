"""The seed promise through the Python client: a sample's pixels (the
train transform's random crop and flip, the real decoders) are the same
whether the product binary serves it standalone or in a cluster, before
or after the coordinator is killed and its sessions start over, and they
differ between epochs."""

import collections
import os
import signal
import sys

import longshore

from test_cluster import finish, read_record, start_trainer, wait_record

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cluster_trainer import pixel_digest  # noqa: E402
from limits import HANG_S

JOB = dict(epochs=2, batch=8, seed=11)
NODE = ["--transform", "train", "--size", "32", "--decoders", "2"]


def standalone_pixels(start_node, dataset, tmp_path):
    """Every sample's digest per (epoch, key), read through the Python
    client from `longshore-node --standalone --sink feed`."""
    feed = str(tmp_path / "standalone-feed")
    node = start_node(["--dataset", dataset, "--epochs", JOB["epochs"], "--batch-size", JOB["batch"],
                       "--seed", JOB["seed"], "--progress", "never", *NODE], feed)
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S)
    px = collections.defaultdict(dict)
    for b in loader.batches():
        for i, (k, pad) in enumerate(zip(b.keys, b.pads)):
            if not pad:
                assert k not in px[b.epoch], f"standalone: epoch {b.epoch} delivered {k} twice"
                px[b.epoch][k] = pixel_digest(b.images[i])
        b.release()
    loader.close()
    # Every epoch delivered and the trainer gone: the node exits 0 by
    # itself, as a cluster node does.
    assert node.wait() == 0, node.stderr
    return px


def committed_pixels(events):
    """Replays a cluster trainer's record: the digests of the real samples
    in committed history, per (epoch, key)."""
    hist, committed = [], 0
    for ev in events:
        if ev["ev"] == "batch":
            hist.append(ev)
        elif ev["ev"] == "ack":
            committed = len(hist)
        elif ev["ev"] == "rollback":
            del hist[committed:]
    px = collections.defaultdict(dict)
    for ev in hist[:committed]:
        for k, d in zip(ev["keys"], ev["px"]):
            assert k not in px[ev["epoch"]], f"epoch {ev['epoch']}: {k} committed twice"
            px[ev["epoch"]][k] = d
    return px


def test_pixels_standalone_and_cluster(start_node, start_cluster, dataset, tmp_path):
    ref = standalone_pixels(start_node, dataset, tmp_path)
    n = len(ref[0])
    assert n > 0 and len(ref[1]) == n, f"standalone epochs delivered {n} and {len(ref[1])} samples"
    same = sum(ref[0][k] == ref[1].get(k) for k in ref[0])
    assert same <= n // 20, f"{same} of {n} samples have the same pixels in both epochs: crops not drawn per epoch"

    c = start_cluster(dataset=dataset, workdir=tmp_path / "cluster", epochs=JOB["epochs"], batch=JOB["batch"],
                      extra_node=NODE)
    record = str(tmp_path / "trainer.jsonl")
    tr = start_trainer(c, record, commit_every=3, step_time=0.01, pixels=True)
    # kill -9 the coordinator in epoch 1: the sessions that follow
    # start mid-job, in epoch 1
    wait_record(record, lambda evs: sum(e["ev"] == "ack" and e["epoch"] == 1 for e in evs) >= 2, tr, c)
    c.coord.send_signal(signal.SIGKILL)
    c.coord.wait()
    c.start_coordinator()
    finish(c, tr)
    events = read_record(record)
    assert any(e["ev"] == "rollback" for e in events), "the coordinator kill caused no rollback"
    got = committed_pixels(events)
    total = diff = 0
    for e, m in got.items():
        assert len(m) == len(ref[e]), f"epoch {e}: {len(m)} samples committed, {len(ref[e])} standalone"
        for k, d in m.items():
            total += 1
            diff += d != ref[e][k]
    print(f"pixels: {total} committed samples compared through the Python client, {diff} differ from standalone")
    assert diff == 0, f"{diff} of {total} committed samples have other pixels than the same job standalone"
