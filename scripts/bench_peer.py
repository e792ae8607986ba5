#!/usr/bin/python3
"""bench_peer.py: longshore against PyTorch's DataLoader, side by side (make bench-peer).

    /usr/bin/python3 scripts/bench_peer.py --dataset DIR [--reps 3] [--json docs/bench/bench-peer.json]

A benchmark, not a test. Every configuration runs as its own process tree,
one after another, alternating (peer w0, w1, w2, w4, py-client,
py-client-ffmpeg, go, ..., peer w0, ...) so machine noise hits them alike;
the table shows medians of the repetitions and ratios to the peer's best
num_workers (by images/s). Every run is checked before it counts: each
side must deliver every sample of the dataset exactly once, with zero
failures, fully shuffled; a run that did not makes the benchmark exit
non-zero (no table).

    peer-wN    PyTorch DataLoader over torchvision ImageFolder:
               RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor,
               batch 32, shuffle=True (a full shuffle), num_workers N
               (persistent workers), one epoch, touching one byte of every
               batch. The dataset returns each sample's index too, so the
               bench counts distinct samples.
    py-client  THE HEADLINE: what a PyTorch user runs. bin/longshore-node
               --standalone --sink feed --transform train --batch-size 32
               --block 1 (a full shuffle, the default for a plain dataset)
               serving one rank over its Unix socket, and a Python trainer
               (the same interpreter, `import torch` first) iterating
               longshore.Loader from clients/python, touching one byte of
               every batch through torch.from_numpy (no copy).
    py-client-ffmpeg
               the same with --decoder ffmpeg: the libjpeg-turbo fast path
               off (every JPEG decoded whole by FFmpeg), to show what
               decoding less buys.
    go         bin/longshore-node --standalone --sink null --block 1:
               batches consumed in process, in Go (no trainer, no torch).
    go-minio   the same with the dataset in a MinIO server on loopback
               (longshore-bench serve-minio: started once, the upload not
               timed; its CPU is not counted, as a store on other hosts).
    go-minio-packed
               the same samples packed into tar shards by bin/longshore-pack
               (docs/packed-datasets.md), in that MinIO, at the node's
               defaults for a packed dataset (blocks of 16 in a mixing
               window of 128, --pack-cache 1 GiB): not a full shuffle.
    ceiling    longshore-bench ceiling: one goroutine per core decoding and
               transforming the files from memory in a tight loop, no
               pipeline: what this machine can do with this decoder.

Figures, for each run:

    images/s       images of the epoch over the time from the loader's start
                   to the last batch in the trainer's hands (peer: from
                   ImageFolder's scan, after `import torch`; py-client: from
                   the node's launch, the trainer having imported torch;
                   go: the node's own figure, from its pipeline start).
    steady img/s   images after the first batch over first -> last batch (the
                   Python trainers).
    CPU-s/1000     user+system CPU of the whole tree over the epoch, per
                   1,000 images. peer: the trainer from the loader's start
                   plus every worker (/proc/<pid>/stat before they stop);
                   py-client: the node's whole process (wait4 rusage, start-up
                   included) plus the trainer from its connect; go: the
                   node's whole process.
    peak PSS       proportional set size summed over the whole process tree
                   (trainer, its workers, the node: /proc/<pid>/smaps_rollup
                   every 100 ms), so pages shared between processes (fork's
                   copy-on-write pages, the feed's memfd slots) count once.
    steady PSS     the median of those samples between first and last batch.
    import PSS     the trainer's own `import torch, torchvision` (peer) or
                   `import torch, longshore` (py-client): the tree's PSS
                   when the trainer has imported and nothing else has
                   started, measured in the same run. `loader PSS` is peak
                   PSS less import PSS: the loader's own memory on either
                   side.
    first batch    from the loader's start (as above) to the first batch in
                   the consumer's hands; go: from the node's launch (exec and
                   loading its libraries included; before 2026-12-06 from
                   the Go program's start). The longshore rows' raw results
                   carry "startup": the phases from launch (exec and the
                   dynamic loader, dataset opened, pipelines serving, the
                   trainer connected, first batch).
    classes/batch  mean distinct labels per full batch: equal on both sides
                   when both shuffle fully (checked: longshore's within 10%
                   of the peer's).

The raw JSON has every repetition with the machine's CPU model and the
load average after each run; scripts/bench_compare.py prints ratios
between two such files.
"""

import argparse
import json
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")


class BenchError(Exception):
    """A run that does not count: lost or failed samples, a crash."""


# --------------------------------------------------------------------------
# /proc helpers (bench_host.py uses them too)


def proc_cpu(pid):
    """User+system CPU seconds of one live process (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0.0
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def self_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tree(pid):
    """pid and its live descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def pss_bytes(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss(roots):
    pids = set()
    for r in roots:
        pids.update(tree(r))
    return sum(pss_bytes(p) for p in pids), len(pids)


class PSSSampler:
    """Samples the summed PSS of the trees under roots every interval
    seconds, keeping (time, bytes, processes) of each sample."""

    def __init__(self, interval=0.1):  # reading smaps_rollup costs the driver ~5% of a core at 50 ms
        self.roots, self.samples, self.interval = [], [], interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def add(self, pid):
        with self._lock:
            self.roots.append(pid)

    def start(self):
        self._t.start()
        return self

    def now(self):
        with self._lock:
            roots = list(self.roots)
        return tree_pss(roots)

    def _run(self):
        while not self._stop.is_set():
            v, n = self.now()
            self.samples.append((time.time(), v, n))
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.peak()

    def peak(self):
        return max((v for _, v, _ in self.samples), default=0)

    def steady(self, t0, t1):
        """Median PSS of the samples taken between t0 and t1 (None: none)."""
        vals = [v for t, v, _ in self.samples if t0 <= t <= t1]
        return statistics.median(vals) if vals else None

    def max_procs(self):
        return max((n for _, _, n in self.samples), default=0)


def wait_rusage(p):
    """Reap a Popen child with wait4: its CPU includes its reaped children."""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


def wait_file(path, procs, what, limit=300):
    """Waits for path to exist; fails if a process in procs exits first."""
    t_end = time.time() + limit
    while not os.path.exists(path):
        for p in procs:
            if p.poll() is not None:
                raise BenchError(f"{what}: process {p.args[:3]} exited {p.returncode} before {os.path.basename(path)}")
        if time.time() > t_end:
            raise BenchError(f"{what}: no {path} after {limit} s")
        time.sleep(0.005)


def touch(path):
    with open(path, "w"):
        pass


def load():
    return list(os.getloadavg())


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def machine():
    return dict(cpu_model=cpu_model(), cpus=os.cpu_count(), kernel=platform.release(),
                python=platform.python_version(),
                mem_total_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def count_samples(dataset):
    """Files of an ImageFolder directory (what both sides must deliver)."""
    return sum(1 for _, _, fs in os.walk(dataset, followlinks=True) for f in fs if not f.startswith("."))


def classes_per_batch(label_batches, batch_size):
    full = [len(set(b)) for b in label_batches if len(b) == batch_size]
    return statistics.mean(full) if full else None


# --------------------------------------------------------------------------
# children: the trainers


def indexed_image_folder(root, transform):
    """ImageFolder whose items carry their index, so a run's distinct
    samples can be counted (one int per sample: negligible)."""
    from torchvision.datasets import ImageFolder

    class Indexed(ImageFolder):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x, y, i

    return Indexed(root, transform=transform)


def child_peer(a):
    import warnings

    warnings.filterwarnings("ignore", message="This DataLoader will create")  # num_workers 4 on 2 cores is asked for
    import torch
    import torchvision  # noqa: F401
    import torchvision.transforms as T
    from torch.utils.data import DataLoader

    touch(a.imported)  # the driver measures the import's PSS, then says go
    while not os.path.exists(a.go):
        time.sleep(0.002)
    cpu0, t0 = self_cpu(), time.time()
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = indexed_image_folder(a.dataset, tf)
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=a.workers,
                        persistent_workers=a.workers > 0)
    it = iter(loader)
    n = touched = 0
    t_first = None
    n_first = 0
    seen = set()
    labels = []
    for images, y, idx in it:
        touched += int(images[0, 0, 0, 0])  # touch the data, as a trainer would
        n += images.shape[0]
        seen.update(idx.tolist())
        labels.append(y.tolist())
        if t_first is None:
            t_first, n_first = time.time(), n
    t_last = time.time()
    workers = [w.pid for w in getattr(it, "_workers", [])]
    cpu = self_cpu() - cpu0 + sum(proc_cpu(w) for w in workers)
    out = dict(images=n, distinct=len(seen), dataset_samples=len(ds), failures=0, t0=t0, t_first=t_first,
               n_first=n_first, t_last=t_last, cpu_epoch=cpu, workers=len(workers), torch=torch.__version__,
               classes_per_batch=classes_per_batch(labels, 32))
    with open(a.out, "w") as f:
        json.dump(out, f)
    del it, loader  # joins the workers, so the parent's rusage includes them


def child_client(a):
    for p in (os.path.join(REPO, "clients", "python"), os.path.join(HERE, "python")):  # the repo, or gpu-check's bundle
        if os.path.isdir(os.path.join(p, "longshore")):
            sys.path.insert(0, p)
            break
    import torch  # a trainer has torch loaded, as the peer does

    import longshore

    touch(a.imported)  # the driver measures the import's PSS, then launches the node
    while not os.path.exists(a.socket):
        time.sleep(0.002)
    cpu0 = self_cpu()
    loader = longshore.Loader(a.socket, release_previous=True, timeout=300)
    for _ in range(5000):  # the socket file appears just before listen()
        try:
            loader.welcome
            break
        except (ConnectionRefusedError, FileNotFoundError):
            time.sleep(0.002)
    t_connected = time.time()
    n = touched = failed = pads = 0
    t_first = None
    n_first = 0
    seen = set()
    labels = []
    for b in loader.batches():  # every epoch the node serves
        x = torch.from_numpy(b.images)  # zero-copy view of the slot
        touched += int(x[0, 0, 0, 0])
        n += len(b)
        failed += b.failed
        pads += sum(1 for p in b.pads if p)
        seen.update(b.indices)
        labels.append(list(b.labels))
        if t_first is None:
            t_first, n_first = time.time(), n
    t_last = time.time()
    cpu = self_cpu() - cpu0
    loader.close()
    with open(a.out, "w") as f:
        json.dump(dict(images=n, distinct=len(seen), failures=failed, pads=pads, t_first=t_first, n_first=n_first,
                       t_connected=t_connected,
                       t_last=t_last, cpu_epoch=cpu, torch=torch.__version__,
                       classes_per_batch=classes_per_batch(labels, 32)), f)


# --------------------------------------------------------------------------
# driver: one run of each kind


def check_counts(what, want, images, distinct=None, failures=0, pads=0, epochs=1):
    """A run counts only if it delivered every sample once an epoch, none failed."""
    problems = []
    if images != want * epochs:
        problems.append(f"delivered {images} images, the dataset has {want} x {epochs} epoch(s)")
    if distinct is not None and distinct != want:
        problems.append(f"{distinct} distinct samples of {want}")
    if failures:
        problems.append(f"{failures} failed samples")
    if pads:
        problems.append(f"{pads} padding samples")
    if problems:
        raise BenchError(f"{what}: " + "; ".join(problems))


def run_peer(a, workers, tmp, rep):
    what = f"peer-w{workers} rep {rep + 1}"
    d = tempfile.mkdtemp(prefix="peer", dir=tmp)
    out, imported, go = (os.path.join(d, x) for x in ("out.json", "imported", "go"))
    s = PSSSampler()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_peer", "--dataset", a.dataset,
                          "--workers", str(workers), "--out", out, "--imported", imported, "--go", go])
    s.add(p.pid)
    try:
        wait_file(imported, [p], what)
        import_pss, _ = s.now()
        s.start()
        touch(go)
        cpu_proc = wait_rusage(p)
    finally:
        if p.returncode is None:
            p.kill()
            p.wait()
    peak = s.stop()
    if p.returncode != 0:
        raise BenchError(f"{what}: exited {p.returncode}")
    with open(out) as f:
        r = json.load(f)
    check_counts(what, a.samples, r["images"], r["distinct"], r["failures"])
    n = r["images"]
    return dict(images=n, distinct=r["distinct"], failures=0,
                images_per_s=n / (r["t_last"] - r["t0"]),
                steady_images_per_s=(n - r["n_first"]) / (r["t_last"] - r["t_first"]),
                cpu_s_per_1000=1000 * r["cpu_epoch"] / n,
                cpu_s_per_1000_process=1000 * cpu_proc / n,
                peak_pss_bytes=peak, steady_pss_bytes=s.steady(r["t_first"], r["t_last"]),
                import_pss_bytes=import_pss, loader_pss_bytes=peak - import_pss,
                processes=s.max_procs(), first_batch_s=r["t_first"] - r["t0"],
                classes_per_batch=r["classes_per_batch"], torch=r["torch"])


def node_stats(path, what):
    with open(path) as f:
        st = json.load(f)
    if st.get("error"):
        raise BenchError(f"{what}: the node reported {st['error']}")
    return st


def run_client(a, tmp, rep, decoder="turbo"):
    what = f"py-client ({decoder}) rep {rep + 1}"
    d = tempfile.mkdtemp(prefix="lsb", dir="/tmp")  # short: Unix socket paths are limited
    out, imported, stats = os.path.join(d, "out.json"), os.path.join(d, "imported"), os.path.join(d, "stats.json")
    sock = os.path.join(d, "rank-0.sock")
    s = PSSSampler()
    c = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_client", "--socket", sock,
                          "--imported", imported, "--out", out])
    s.add(c.pid)
    srv = None
    try:
        wait_file(imported, [c], what)
        import_pss, _ = s.now()
        s.start()
        t0 = time.time()
        argv = [a.node, "--standalone", "--sink", "feed", "--feed-dir", d, "--dataset", a.dataset,
                "--epochs", str(a.epochs), "--batch-size", "32", "--transform", "train", "--block", "1",
                "--decoder", decoder, "--seed", str(rep + 1), "--stats-json", stats, "--progress", "never",
                *shlex.split(a.node_args)]
        srv = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        s.add(srv.pid)
        cpu_c = wait_rusage(c)
        # The node exits by itself once the epoch is delivered and its
        # trainer has left; its rusage is the whole process's.
        err = srv.stderr.read()
        cpu_srv = wait_rusage(srv)
    finally:
        for p in (c, srv):
            if p is not None and p.returncode is None:
                p.kill()
                p.wait()
    peak = s.stop()
    if c.returncode != 0 or srv.returncode != 0:
        raise BenchError(f"{what}: trainer exited {c.returncode}, node {srv.returncode}: {err.decode(errors='replace')[-2000:]}")
    with open(out) as f:
        r = json.load(f)
    st = node_stats(stats, what)
    check_counts(what + " (trainer)", a.samples, r["images"], r["distinct"], r["failures"], r["pads"], a.epochs)
    check_counts(what + " (node)", a.samples, st["images"], None, st["failures"]["total"], st["pads"], a.epochs)
    n = r["images"]
    return dict(images=n, distinct=r["distinct"], failures=st["failures"]["total"],
                images_per_s=n / (r["t_last"] - t0),
                steady_images_per_s=(n - r["n_first"]) / (r["t_last"] - r["t_first"]),
                cpu_s_per_1000=1000 * (r["cpu_epoch"] + cpu_srv) / n,
                cpu_s_per_1000_node=1000 * cpu_srv / n,
                cpu_s_per_1000_trainer=1000 * r["cpu_epoch"] / n,
                cpu_s_per_1000_process=1000 * (cpu_c + cpu_srv) / n,
                peak_pss_bytes=peak, steady_pss_bytes=s.steady(r["t_first"], r["t_last"]),
                import_pss_bytes=import_pss, loader_pss_bytes=peak - import_pss,
                processes=s.max_procs(), first_batch_s=r["t_first"] - t0,
                classes_per_batch=r["classes_per_batch"], node_argv=argv[1:],
                node_images_per_s=st["images_per_second"], bottleneck=st.get("bottleneck"),
                startup=startup_phases(st, t0, connected=r["t_connected"], first=r["t_first"]))


def run_measured(argv, what, env=None):
    """Runs argv as one process, sampling its PSS; returns (CPU seconds, peak PSS)."""
    s = PSSSampler()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    s.add(p.pid)
    s.start()
    err = p.stderr.read()
    cpu_proc = wait_rusage(p)
    peak = s.stop()
    if p.returncode != 0:
        raise BenchError(f"{what} exited {p.returncode}: {err.decode(errors='replace')[-2000:]}")
    return cpu_proc, peak


def run_go(a, tmp, rep, dataset=None, env=None, tag="go", block=("--block", "1"), extra=()):
    stats = os.path.join(tmp, f"{tag}-{rep}.json")
    argv = [a.node, "--standalone", "--dataset", dataset or a.dataset, "--epochs", str(a.epochs), "--batch-size", "32",
            "--transform", "train", *block, "--seed", str(rep + 1), "--sink", "null",
            "--stats-json", stats, "--progress", "never", *extra, *shlex.split(a.node_args)]
    t0 = time.time()
    cpu_proc, peak = run_measured(argv, f"{tag} rep {rep + 1}", env)
    st = node_stats(stats, tag)
    startup = startup_phases(st, t0)
    check_counts(f"{tag} rep {rep + 1}", a.samples, st["images"], None, st["failures"]["total"], st["pads"], a.epochs)
    n = st["images"]
    return dict(images=n, failures=0, images_per_s=n / st["seconds"], steady_images_per_s=None,
                cpu_s_per_1000=1000 * cpu_proc / n, cpu_s_per_1000_process=1000 * cpu_proc / n,
                peak_pss_bytes=peak, import_pss_bytes=0, loader_pss_bytes=peak,
                first_batch_s=startup["first_batch_s"] if startup else st["first_batch_seconds"],
                node_argv=argv[1:], pack=st.get("pack"), bottleneck=st.get("bottleneck"), startup=startup,
                # from the pipeline's start, as "seconds" counts
                run_first_batch_s=st["first_batch_seconds"] - (st["startup"]["serving_seconds"] if startup else 0))


def startup_phases(st, t0, connected=None, first=None):
    """Where a node run's time before its first batch went, in seconds from
    its launch at t0: exec and the dynamic loader (exec_load_s: to the Go
    program's start; load_cpu_s is the CPU that took), the dataset
    opened, the pipelines serving, the trainer connected and the first
    batch in the consumer's hands (the node's own, or the trainer's at
    first). None when the node does not report its start-up."""
    su = st.get("startup")
    if not su:
        return None
    at = su["started_unix"] - t0
    out = dict(exec_load_s=at, load_cpu_s=su["load_cpu_seconds"], opened_s=at + su["opened_seconds"],
               serving_s=at + su["serving_seconds"], first_batch_s=at + su["first_batch_seconds"])
    if connected is not None:
        out["connected_s"] = connected - t0
    if first is not None:
        out["first_batch_s"] = first - t0
    return out


def startup_line(su):
    if not su:
        return ""
    parts = [f"exec+load {su['exec_load_s']:.3f}", f"opened {su['opened_s']:.3f}", f"serving {su['serving_s']:.3f}"]
    if "connected_s" in su:
        parts.append(f"connected {su['connected_s']:.3f}")
    parts.append(f"first batch {su['first_batch_s']:.3f}")
    return "; start-up (s from launch): " + ", ".join(parts)


def run_go_minio(a, tmp, rep, packed=False):
    env = os.environ.copy()
    env.update(e.split("=", 1) for e in a.minio["env"])
    if packed:  # the node's defaults for a packed dataset: blocks of 16, window 128, --pack-cache 1 GiB
        return run_go(a, tmp, rep, dataset=a.minio["packed_url"], env=env, tag="go-minio-packed", block=())
    return run_go(a, tmp, rep, dataset=a.minio["url"], env=env, tag="go-minio")


def run_ceiling(a, tmp, rep):
    out = os.path.join(tmp, f"ceiling-{rep}.json")
    cpu_proc, peak = run_measured([a.bench, "ceiling", "--dataset", a.dataset, "--json", out], "ceiling")
    with open(out) as f:
        r = json.load(f)
    n = r["images"]
    if r.get("failed"):
        raise BenchError(f"ceiling rep {rep + 1}: {r['failed']} failed")
    return dict(images=n, failures=0, images_per_s=n / r["seconds"], steady_images_per_s=None,
                cpu_s_per_1000=1000 * cpu_proc / n, cpu_s_per_1000_process=1000 * cpu_proc / n,
                peak_pss_bytes=peak, import_pss_bytes=0, loader_pss_bytes=peak, first_batch_s=None)


def start_minio(a, tmp):
    ready = os.path.join(tmp, "minio.json")
    cmd = [a.bench, "serve-minio", "--dataset", a.dataset, "--ready", ready]
    if a.packed:
        cmd += ["--packed", a.packed]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)  # its stderr is ours: MinIO's complaints show
    while not os.path.exists(ready):
        if p.poll() is not None:
            sys.exit(f"bench_peer: longshore-bench serve-minio exited {p.returncode}")
        time.sleep(0.1)
    with open(ready) as f:
        a.minio = json.load(f)
    return p


def median_row(runs):
    m = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)]
        m[k] = statistics.median(vals) if vals else None
    return m


def go_steady(r):
    """Go in process's steady images/s: after its first batch, as the
    client's is measured (both from the node's stats, from its pipeline's
    start)."""
    return (r["images"] - 32) / (r["images"] / r["images_per_s"] - r["run_first_batch_s"])


def feed_only(a):
    """--feed-only: the feed's own cost. The node with --decoder none (no
    decode: a sample's pixels are its bytes repeated; --feed-decoder picks
    another, e.g. turbo for the path users run) consumed in process
    (--sink null) against the same node serving the Python client, rep by
    rep back to back; the client's steady images/s over Go's steady."""
    a.samples = count_samples(a.dataset)
    tmp = tempfile.mkdtemp(prefix="bench-feed-")
    dec = a.feed_decoder
    go, py = f"go-{dec}", f"py-client-{dec}"
    runs = {go: [], py: []}
    load0, t_start = load(), time.time()
    try:
        for rep in range(a.reps):
            for c in runs:
                if c == go:
                    r = run_go(a, tmp, rep, tag=c, extra=("--decoder", dec))
                    r["steady_images_per_s"] = go_steady(r)
                else:
                    r = run_client(a, tmp, rep, decoder=dec)
                r["rep"], r["loadavg_after"] = rep + 1, load()
                runs[c].append(r)
                print(f"bench-feed: rep {rep + 1} {c:15s} {r['images_per_s']:7.0f} images/s"
                      f"{'' if r['steady_images_per_s'] is None else ', steady %.0f' % r['steady_images_per_s']}, "
                      f"{r['cpu_s_per_1000']:.3f} CPU-s/1000 (load {r['loadavg_after'][0]:.2f})", file=sys.stderr, flush=True)
    except BenchError as e:
        sys.exit(f"bench_peer: INVALID RUN: {e}")
    pairs = list(zip(runs[py], runs[go]))
    steady = statistics.median(c["steady_images_per_s"] / g["steady_images_per_s"] for c, g in pairs)
    # before 2026-12-05 the client's steady rate was set against Go's whole run
    steady_vs_whole = statistics.median(c["steady_images_per_s"] / g["images_per_s"] for c, g in pairs)
    whole = statistics.median(c["images_per_s"] / g["images_per_s"] for c, g in pairs)
    own = statistics.median(c["steady_images_per_s"] / c["node_images_per_s"] for c, _ in pairs)
    cpu = statistics.median(c["cpu_s_per_1000"] / g["cpu_s_per_1000"] for c, g in pairs)
    print(f"\nbench-feed: {a.samples} samples x {a.epochs} epochs, --decoder {dec}, {a.reps} reps, {cpu_model()}, "
          f"{os.cpu_count()} CPUs")
    print("| config | images/s (median) | steady images/s | CPU-s/1000 (node + trainer) |")
    print("|---|---:|---:|---:|")
    for c, rs in runs.items():
        m = median_row(rs)
        st = "-" if m["steady_images_per_s"] is None else f"{m['steady_images_per_s']:.0f}"
        print(f"| {c} | {m['images_per_s']:.0f} | {st} | {m['cpu_s_per_1000']:.3f} |")
    print(f"\nPython client / Go in process, paired by rep: steady {steady:.3f}x (against Go's whole run "
          f"{steady_vs_whole:.3f}x), whole run {whole:.3f}x, "
          f"CPU {cpu:.2f}x; client steady / its own node's images/s {own:.3f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(kind="bench-feed", machine=cpu_model(), cpus=os.cpu_count(), samples=a.samples, reps=a.reps,
                           load_before=load0, started=t_start, runs=runs,
                           decoder=dec, epochs=a.epochs,
                           paired=dict(steady=steady, steady_vs_go_whole=steady_vs_whole, whole=whole, own_node=own,
                                       cpu=cpu)), f, indent=1)


def driver(a):
    if a.feed_only:
        return feed_only(a)
    needs_bench = not (a.no_ceiling and a.no_minio)  # the ceiling and MinIO's server
    for path, what in ((a.node, "go build -o bin/longshore-node ./cmd/node"),
                       (a.bench, "go build -o bin/longshore-bench ./cmd/longshore-bench")):
        if path == a.bench and not needs_bench:
            continue
        if not os.access(path, os.X_OK):
            sys.exit(f"bench_peer: {path} missing: {what}")
    a.samples = count_samples(a.dataset)
    configs = [f"peer-w{w}" for w in a.workers] + ["py-client", "py-client-ffmpeg", "go"]
    if not a.no_ceiling:
        configs.append("ceiling")
    tmp = tempfile.mkdtemp(prefix="bench-peer-")
    minio = None
    a.packed = None
    if not a.no_minio:
        if os.access(a.pack, os.X_OK):
            a.packed = os.path.join(tmp, "packed")
            subprocess.run([a.pack, "--dataset", a.dataset, "--out", a.packed], check=True,
                           stdout=subprocess.DEVNULL)
        print("bench-peer: starting MinIO and uploading the dataset", file=sys.stderr, flush=True)
        minio = start_minio(a, tmp)
        configs.insert(configs.index("go") + 1, "go-minio")
        if a.packed:
            configs.insert(configs.index("go-minio") + 1, "go-minio-packed")
    runs = {c: [] for c in configs}
    load0, t_start = load(), time.time()
    try:
        run_all(a, configs, runs, tmp)
    except BenchError as e:
        sys.exit(f"bench_peer: INVALID RUN: {e}")
    finally:
        if minio is not None:
            minio.send_signal(signal.SIGTERM)
            minio.wait()
    report_all(a, configs, runs, load0, t_start)


def run_all(a, configs, runs, tmp):
    for rep in range(a.reps):
        for c in configs:
            if c.startswith("peer-w"):
                r = run_peer(a, int(c[6:]), tmp, rep)
            elif c == "py-client":
                r = run_client(a, tmp, rep)
            elif c == "py-client-ffmpeg":
                r = run_client(a, tmp, rep, decoder="ffmpeg")
            elif c == "go":
                r = run_go(a, tmp, rep)
            elif c in ("go-minio", "go-minio-packed"):
                r = run_go_minio(a, tmp, rep, packed=c == "go-minio-packed")
            elif c == "ceiling":
                r = run_ceiling(a, tmp, rep)
            r["rep"] = rep + 1
            r["loadavg_after"] = load()
            runs[c].append(r)
            fb = "-" if r["first_batch_s"] is None else f"{r['first_batch_s']:.3f}"
            print(f"bench-peer: rep {rep + 1} {c:16s} {r['images_per_s']:6.0f} images/s, "
                  f"{r['cpu_s_per_1000']:.2f} CPU-s/1000, {r['peak_pss_bytes'] / 2**20:.0f} MiB PSS "
                  f"({r['loader_pss_bytes'] / 2**20:.0f} loader), first batch {fb} s "
                  f"(load {r['loadavg_after'][0]:.2f}){startup_line(r.get('startup'))}", file=sys.stderr, flush=True)


PYTHON_TREES = ("peer", "py-client")  # rows whose tree has a trainer that imported torch


def report_all(a, configs, runs, load0, t_start):
    rows = {c: median_row(runs[c]) for c in configs}
    peers = [c for c in configs if c.startswith("peer")]
    best = max(peers, key=lambda c: rows[c]["images_per_s"])
    b = rows[best]
    for c in configs:
        m = rows[c]
        m["vs_peer_images_per_s"] = m["images_per_s"] / b["images_per_s"]
        m["vs_peer_cpu"] = m["cpu_s_per_1000"] / b["cpu_s_per_1000"]
        m["vs_peer_pss"] = m["peak_pss_bytes"] / b["peak_pss_bytes"]
        m["vs_peer_loader_pss"] = m["loader_pss_bytes"] / max(b["loader_pss_bytes"], 1)
        m["vs_peer_first_batch"] = None if m["first_batch_s"] is None else m["first_batch_s"] / b["first_batch_s"]
        if "ceiling" in rows:
            m["vs_ceiling_images_per_s"] = m["images_per_s"] / rows["ceiling"]["images_per_s"]
    for mc in ("go-minio", "go-minio-packed"):
        if mc in rows:
            rows[mc]["vs_local_images_per_s"] = rows[mc]["images_per_s"] / rows["go"]["images_per_s"]
    # Paired ratios, run by run (each pair ran back to back): steadier than ratios of medians.
    paired = {}
    for c in ("py-client", "py-client-ffmpeg", "go"):
        if c in runs:
            paired[c] = dict(
                images_per_s=statistics.median(x["images_per_s"] / y["images_per_s"] for x, y in zip(runs[c], runs[best])),
                cpu=statistics.median(x["cpu_s_per_1000"] / y["cpu_s_per_1000"] for x, y in zip(runs[c], runs[best])))
    if "py-client" in runs and "py-client-ffmpeg" in runs:
        paired["py-client-ffmpeg/py-client"] = dict(
            images_per_s=statistics.median(x["images_per_s"] / y["images_per_s"]
                                           for x, y in zip(runs["py-client-ffmpeg"], runs["py-client"])),
            cpu=statistics.median(x["cpu_s_per_1000"] / y["cpu_s_per_1000"]
                                  for x, y in zip(runs["py-client-ffmpeg"], runs["py-client"])))
    # Both sides fully shuffled: longshore's batches as mixed as the peer's.
    cpb_peer = statistics.median(r["classes_per_batch"] for c in peers for r in runs[c])
    for c in ("py-client", "py-client-ffmpeg"):
        if c in runs:
            v = statistics.median(r["classes_per_batch"] for r in runs[c])
            if v < 0.9 * cpb_peer:
                sys.exit(f"bench_peer: INVALID RUN: {c} batches hold {v:.1f} distinct classes against the peer's "
                         f"{cpb_peer:.1f}: not a full shuffle")
    report = dict(
        bench="bench-peer", machine=machine(), dataset=a.dataset, dataset_samples=a.samples,
        repetitions=a.reps, peer_best=best, started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t_start)),
        seconds=round(time.time() - t_start, 1), loadavg_before=load0, loadavg_after=load(),
        torch=runs[best][0].get("torch"), classes_per_batch_peer=cpb_peer, paired_vs_peer_best=paired,
        rows={c: dict(median=rows[c], runs=runs[c]) for c in configs})
    print_table(report, configs, rows)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")


def mib(v):
    return "-" if v is None else f"{v / 2**20:.0f} MiB"


def print_table(rep, configs, rows):
    m0 = rep["machine"]
    print(f"\nlongshore vs PyTorch DataLoader — {m0['cpu_model']}, {m0['cpus']} CPUs; {rep['dataset_samples']} JPEGs; "
          f"RandomResizedCrop(224)+flip, uint8, batch 32, full shuffle both sides; medians of {rep['repetitions']}; "
          f"load avg {rep['loadavg_before'][0]:.2f} before, {rep['loadavg_after'][0]:.2f} after\n")
    hdr = ("config", "images/s", "steady img/s", "CPU-s/1000", "peak PSS", "steady PSS", "import PSS", "loader PSS",
           "first batch", "classes/batch", "img/s ×", "CPU ×", "PSS ×", "loader PSS ×")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in hdr) + "|")
    for c in configs:
        m = rows[c]
        name = c + (" (peer best)" if c == rep["peer_best"] else "")
        steady = f"{m['steady_images_per_s']:.0f}" if m["steady_images_per_s"] else "-"
        fb = "-" if m["first_batch_s"] is None else f"{m['first_batch_s']:.3f} s"
        cpb = "-" if m.get("classes_per_batch") is None else f"{m['classes_per_batch']:.1f}"
        print(f"| {name} | {m['images_per_s']:.0f} | {steady} | {m['cpu_s_per_1000']:.2f} | "
              f"{mib(m['peak_pss_bytes'])} | {mib(m.get('steady_pss_bytes'))} | {mib(m['import_pss_bytes'])} | "
              f"{mib(m['loader_pss_bytes'])} | {fb} | {cpb} | {m['vs_peer_images_per_s']:.2f} | "
              f"{m['vs_peer_cpu']:.2f} | {m['vs_peer_pss']:.2f} | {m['vs_peer_loader_pss']:.2f} |")
    for mc in ("go-minio", "go-minio-packed"):
        if mc in rows:
            print(f"\n{mc} / go (MinIO path vs local path): {rows[mc]['vs_local_images_per_s']:.2f}", end="")
    print()
    for k, v in rep["paired_vs_peer_best"].items():
        print(f"paired, run by run: {k}: {v['images_per_s']:.2f}× images/s, {v['cpu']:.2f}× CPU per image"
              + ("" if "/" in k else f" (vs {rep['peer_best']})"))
    print(f"\n(every run delivered all {rep['dataset_samples']} samples once, 0 failures; "
          f"loader PSS = peak PSS less the trainer's own import measured in the same run; {rep['seconds']:.0f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", default="driver", choices=["driver", "_peer", "_client"])
    ap.add_argument("--dataset")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", default="0,1,2,4", help="peer num_workers to try (driver), or the one (child)")
    ap.add_argument("--node", default=os.path.join(REPO, "bin", "longshore-node"))
    ap.add_argument("--bench", default=os.path.join(REPO, "bin", "longshore-bench"))
    ap.add_argument("--pack", default=os.path.join(REPO, "bin", "longshore-pack"),
                    help="the pack binary, for go-minio-packed (skipped when missing)")
    ap.add_argument("--no-minio", action="store_true", help="skip the go-minio configurations")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the ceiling configuration")
    ap.add_argument("--epochs", type=int, default=1, help="epochs of each longshore run (the peer makes one)")
    ap.add_argument("--feed-only", action="store_true",
                    help="only the feed's own cost: --decoder none, Go in process against the Python client (no peer)")
    ap.add_argument("--feed-decoder", default="none",
                    help="--feed-only's decoder: none (the feed's own cost), or turbo/ffmpeg (the path users run)")
    ap.add_argument("--node-args", default="", help="more flags for every longshore-node run, e.g. \"--slots 8\"")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--out")
    ap.add_argument("--socket")
    ap.add_argument("--imported")
    ap.add_argument("--go")
    a = ap.parse_args()
    if a.mode == "_peer":
        a.workers = int(a.workers)
        return child_peer(a)
    if a.mode == "_client":
        return child_client(a)
    if not a.dataset:
        ap.error("--dataset is required")
    if a.epochs != 1 and not a.feed_only:
        ap.error("--epochs is for --feed-only (the peer makes one epoch)")
    a.workers = [int(w) for w in a.workers.split(",")]
    driver(a)


if __name__ == "__main__":
    main()
