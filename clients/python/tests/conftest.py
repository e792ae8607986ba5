"""Fixtures: a real feed server (examples/feed_server: the Go pipeline with
the FFmpeg/libjpeg-turbo decoder) over a real-photo dataset; the product
binaries as processes: start_node (longshore-node --standalone --sink
feed) and start_cluster (a coordinator and a node), their stderr in the
report of a test that fails.

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
from limits import HANG_S, wait_for_path

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


_given_ports = set()


def free_port(host):
    """A port free on host for TCP and UDP (gossip uses both), for a process
    the test starts to bind.

    Drawn at random below the kernel's ephemeral range, where no bind(0) or
    outgoing connection beside the test can take it before the process
    binds it (as the Go tests' internal/testports), and never given twice.
    """
    import random
    import socket

    hi = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            hi = max(1025, int(f.read().split()[0]))
    except (OSError, ValueError, IndexError):
        pass
    lo = max(1024, hi - 12000)
    for _ in range(1000):
        port = random.randrange(lo, hi)
        if port in _given_ports:
            continue
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind((host, port))
            u.bind((host, port))
        except OSError:
            continue
        finally:
            u.close()
            t.close()
        _given_ports.add(port)
        return port
    raise RuntimeError(f"no free port on {host} in [{lo}, {hi})")


class Proc:
    """A process of the product (longshore-node, longshore-coordinator)
    with its stderr in a file, never a pipe: it can be read at any time
    (while the process runs, after it hangs), and a chatty process cannot
    fill a pipe nobody reads and stall. stdout: "inherit" (the test's
    output), "err" (into the same file) or "capture" (a file of its own,
    read by .stdout)."""

    def __init__(self, argv, log_dir, name, *, stdout="inherit", cwd=None):
        self.name = name
        self.err_path = os.path.join(str(log_dir), name + ".err")
        self.out_path = os.path.join(str(log_dir), name + ".out") if stdout == "capture" else None
        with open(self.err_path, "w") as err:
            if stdout == "err":
                out = err
            elif stdout == "capture":
                out = open(self.out_path, "w")
            else:
                out = None
            try:
                self.proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd)
            finally:
                if stdout == "capture":
                    out.close()

    @property
    def pid(self):
        return self.proc.pid

    @property
    def returncode(self):
        return self.proc.returncode

    def poll(self):
        return self.proc.poll()

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=HANG_S):
        """The exit code; raises subprocess.TimeoutExpired past timeout."""
        return self.proc.wait(timeout)

    @staticmethod
    def _read(path, lines=None):
        try:
            with open(path) as f:
                return "".join(f.readlines()[-lines:]) if lines else f.read()
        except OSError:
            return ""

    @property
    def stderr(self):
        """What the process wrote to stderr so far."""
        return self._read(self.err_path)

    def tail(self, lines=40):
        return self._read(self.err_path, lines)

    @property
    def stdout(self):
        """What the process wrote to stdout so far (stdout="capture")."""
        return self._read(self.out_path)

    def wait_for(self, path, what):
        """path, once it exists; raises with the stderr if the process
        exits first (or the hang bound passes)."""
        return wait_for_path(path, self.proc, what, log=lambda: self.stderr)

    def stop(self):
        """Kills the process if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _show_on_failure(request, name, log):
    """log() goes into the report of this test if it fails (see
    pytest_runtest_makereport): a process's stderr, to debug a flake."""
    logs = getattr(request.node, "_longshore_logs", None)
    if logs is None:
        logs = request.node._longshore_logs = []
    logs.append((name, log))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for name, log in getattr(item, "_longshore_logs", ()):
            rep.sections.append((f"{name} ({rep.when})", log() or "(nothing)"))


class Node(Proc):
    """longshore-node --standalone --sink feed --feed-dir feed_dir, with
    the test's flags."""

    def __init__(self, binary, args, feed_dir, log_dir, name, **kw):
        self.feed_dir = str(feed_dir)
        argv = [binary, "--standalone", "--sink", "feed", "--feed-dir", self.feed_dir, *args]
        super().__init__(argv, log_dir, name, **kw)

    def socket(self, rank=0):
        """The rank's socket, once the node listens on it; raises with
        the node's stderr if it exits first."""
        return self.wait_for(os.path.join(self.feed_dir, f"rank-{rank}.sock"), "the standalone node")


@pytest.fixture
def start_node(cluster_bins, tmp_path, request):
    """start_node(args, feed_dir, stdout="inherit"): a standalone node
    (Node) serving its feed in feed_dir, its stderr in the test's
    tmp_path and in the report if the test fails; killed at teardown if
    it still runs."""
    nodes = []

    def start(args, feed_dir, stdout="inherit"):
        name = f"node-{len(nodes) + 1}"
        n = Node(cluster_bins[1], [str(a) for a in args], feed_dir, tmp_path, name, stdout=stdout)
        nodes.append(n)
        _show_on_failure(request, f"{name} stderr", lambda: n.tail(200))
        return n

    yield start
    for n in nodes:
        n.stop()


class Cluster:
    """A coordinator (journal in a directory) and one node with --sink feed
    serving `ranks` ranks, as real processes (Proc, stdout and stderr in
    <dir>/<name>.err) on loopback."""

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
        p = Proc(argv, self.dir, name, stdout="err", cwd=self.dir)
        self.procs.append(p)
        return p

    def start_coordinator(self):
        self.lives += 1
        self.coord = self._start(f"coordinator-{self.lives}", [self.coord_bin, *self.coord_args])
        return self.coord

    def socket(self, rank=0):
        """The rank's socket, once the node listens on it."""
        return self.node.wait_for(os.path.join(self.feed_dir, f"rank-{rank}.sock"), "the node")

    def stderr(self, name, lines=40):
        return Proc._read(os.path.join(self.dir, name + ".err"), lines)

    def logs(self):
        names = ["node"] + [f"coordinator-{i}" for i in range(1, self.lives + 1)]
        return "\n".join(f"--- {n}:\n{self.stderr(n)}" for n in names)

    def stop(self):
        for p in self.procs:
            p.stop()


@pytest.fixture
def start_cluster(cluster_bins, tmp_path, request):
    """start_cluster(dataset=None, workdir=None, **Cluster's options): a
    Cluster over dataset (default: tiny_dataset) in workdir (default: the
    test's tmp_path), its logs in the report if the test fails; stopped
    at teardown."""
    clusters = []

    def start(dataset=None, workdir=None, **kw):
        if dataset is None:
            dataset = request.getfixturevalue("tiny_dataset")[0]
        workdir = tmp_path if workdir is None else pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        c = Cluster(cluster_bins, dataset, workdir, **kw)
        clusters.append(c)
        _show_on_failure(request, f"cluster {len(clusters)} logs", c.logs)
        return c

    yield start
    for c in clusters:
        c.stop()
