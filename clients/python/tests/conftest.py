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
import time

import pytest

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
        deadline = time.time() + 120
        while not os.path.exists(ready):
            if self.proc.poll() is not None:
                raise RuntimeError("feed_server exited: " + self.proc.stderr.read())
            if time.time() > deadline:
                raise TimeoutError("feed_server did not start")
            time.sleep(0.05)
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
