"""Fixtures: a real feed server (examples/feed_server: the Go pipeline with
the FFmpeg/libjpeg-turbo decoder) over a real-photo dataset.

LONGSHORE_FEED_SERVER: a built feed_server binary (else built here with go).
LONGSHORE_TEST_DATASET: the dataset (default: the demo ImageNet-like set).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile

import pytest
from limits import wait_for_path

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "clients" / "python"))


@pytest.fixture(scope="session")
def server_bin(tmp_path_factory):
    b = os.environ.get("LONGSHORE_FEED_SERVER")
    if b:
        return b
    out = tmp_path_factory.mktemp("bin") / "feed_server"
    subprocess.run(["go", "build", "-o", str(out), "./examples/feed_server"], cwd=REPO, check=True)
    return str(out)


@pytest.fixture(scope="session")
def dataset():
    d = os.environ.get("LONGSHORE_TEST_DATASET") or os.path.expanduser(
        "~/.cache/longshore/datasets/imagenet-like-n512-s1")
    if not os.path.isdir(d):
        d = subprocess.run([str(REPO / "scripts" / "dataset.sh"), "512"], check=True,
                           capture_output=True, text=True).stdout.strip()
    return d


class Server:
    def __init__(self, binary, dataset, **kw):
        self.dir = tempfile.mkdtemp(prefix="lsf")
        self.sums_path = os.path.join(self.dir, "sums.jsonl") if kw.pop("checksums", False) else None
        args = dict(ranks=1, batch_size=16, size=64, epochs=1, slots=4, decoders=2, seed=3, transform="train")
        args.update(kw)
        ready = os.path.join(self.dir, "ready")
        cmd = [binary, "--dataset", dataset, "--dir", self.dir, "--ready", ready]
        for k, v in args.items():
            cmd += ["--" + k.replace("_", "-"), str(v)]
        if self.sums_path:
            cmd += ["--checksums", self.sums_path]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        wait_for_path(ready, self.proc, "feed_server")
        self.batch_size = args["batch_size"]

    def socket(self, rank=0):
        return os.path.join(self.dir, f"rank-{rank}.sock")

    def sums(self):
        out = {}
        with open(self.sums_path) as f:
            for line in f:
                r = json.loads(line)
                out[(r["rank"], r["epoch"], r["step"], r["i"])] = (r["crc"], r["key"])
        return out

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.stderr.close()


@pytest.fixture
def start_server(server_bin, dataset):
    servers = []

    def start(**kw):
        s = Server(server_bin, dataset, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


# -- cluster mode: a real coordinator and node (--sink feed) on loopback ------


@pytest.fixture(scope="session")
def cluster_bins(tmp_path_factory):
    """longshore-coordinator and longshore-node, built with go (or from
    $LONGSHORE_BIN_DIR, a directory holding both)."""
    d = os.environ.get("LONGSHORE_BIN_DIR")
    if not d:
        d = str(tmp_path_factory.mktemp("clusterbin"))
        for out, pkg in (("longshore-coordinator", "./cmd/coordinator"), ("longshore-node", "./cmd/node")):
            subprocess.run(["go", "build", "-o", os.path.join(d, out), pkg], cwd=REPO, check=True)
    return os.path.join(d, "longshore-coordinator"), os.path.join(d, "longshore-node")


@pytest.fixture
def tiny_dataset(tmp_path):
    """240 tiny JPEGs in ImageFolder layout (3 classes); returns (dir, keys)."""
    from PIL import Image

    root = tmp_path / "ds"
    keys = []
    for i in range(240):
        key = f"c{i % 3}/img{i:04d}.jpg"
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        px = bytes((i * 7 + p) % 256 for p in range(16 * 16 * 3))
        Image.frombytes("RGB", (16, 16), px).save(root / key, "JPEG")
        keys.append(key)
    return str(root), sorted(keys)


def free_port(host):
    """A port free on host for TCP and UDP (gossip uses both), as far as one can tell."""
    import socket

    for _ in range(50):
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.bind((host, 0))
        port = t.getsockname()[1]
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            u.close()
            t.close()
    raise RuntimeError("no free port")


class Cluster:
    """A coordinator (journal in a directory) and one node with --sink feed
    serving `ranks` ranks, as real processes on loopback."""

    def __init__(self, bins, dataset, workdir, *, epochs=2, batch=8, ranks=1, extra_node=(), extra_coord=()):
        self.coord_bin, self.node_bin = bins
        self.dir = str(workdir)
        self.feed_dir = os.path.join(self.dir, "feed")
        self.procs = []
        self.lives = 0
        join = f"127.0.0.1:{free_port('127.0.0.1')}"
        self.coord_args = [
            "--dataset", dataset, "--listen", f"127.0.0.1:{free_port('127.0.0.1')}", "--gossip", join,
            "--gossip-profile", "local", "--epochs", str(epochs), "--seed", "11", "--batch-size", str(batch),
            "--shard-size", "16", "--balance", "equal", "--commit-log", os.path.join(self.dir, "coord.acks"),
            "--linger", "20s", "--min-ranks", str(ranks), "--checkpoint", os.path.join(self.dir, "journal"),
            "--journal-keep", "100000", *extra_coord,
        ]
        self.coord = self.start_coordinator()
        host = "127.0.0.2"
        self.node = self._start("node", [
            self.node_bin, "--id", "n1", "--join", join, "--gossip", f"{host}:{free_port(host)}",
            "--listen", f"{host}:{free_port(host)}", "--gossip-profile", "local", "--ranks", str(ranks),
            "--dataset", dataset, "--sink", "feed", "--feed-dir", self.feed_dir, "--size", "16",
            "--transform", "resize", "--decoders", "1", "--fetch-concurrency", "2", "--slots", "2",
            "--progress", "never", *extra_node])

    def _start(self, name, argv):
        err = open(os.path.join(self.dir, name + ".err"), "w")
        p = subprocess.Popen(argv, stdout=err, stderr=err, cwd=self.dir)
        err.close()
        p.name = name
        self.procs.append(p)
        return p

    def start_coordinator(self):
        self.lives += 1
        self.coord = self._start(f"coordinator-{self.lives}", [self.coord_bin, *self.coord_args])
        return self.coord

    def socket(self, rank=0):
        """The rank's socket, once the node listens on it."""
        path = os.path.join(self.feed_dir, f"rank-{rank}.sock")
        return wait_for_path(path, self.node, "the node", log=lambda: self.stderr("node"))

    def stderr(self, name, lines=40):
        try:
            with open(os.path.join(self.dir, name + ".err")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def logs(self):
        names = ["node"] + [f"coordinator-{i}" for i in range(1, self.lives + 1)]
        return "\n".join(f"--- {n}:\n{self.stderr(n)}" for n in names)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def start_cluster(cluster_bins, tiny_dataset, tmp_path):
    clusters = []

    def start(**kw):
        c = Cluster(cluster_bins, tiny_dataset[0], tmp_path, **kw)
        clusters.append(c)
        return c

    yield start
    for c in clusters:
        c.stop()
