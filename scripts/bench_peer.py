#!/usr/bin/python3
"""bench_peer.py: longshore against PyTorch's DataLoader, side by side (make bench-peer).

    /usr/bin/python3 scripts/bench_peer.py --dataset DIR [--reps 3] [--json bin/bench-peer.json]

A benchmark, not a test. Every configuration runs as its own process tree,
one after another, alternating (peer w0, w1, w2, w4, go, py-client, peer
w0, ...) so machine noise hits them alike; the table shows medians of the
repetitions and ratios to the peer's best num_workers (by images/s).

    peer-wN    PyTorch DataLoader over torchvision ImageFolder:
               RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor,
               batch 32, shuffle, num_workers N (persistent workers), one epoch,
               touching one byte of every batch.
    go         bin/longshore-node --standalone --transform train --batch-size 32
               --sink null: batches consumed in process, in Go.
    go-minio   the same with the dataset in a MinIO server on loopback
               (longshore-bench serve-minio: started once, the upload not
               timed; its CPU is not counted, as a store on other hosts).
    go-minio-packed
               the same with the dataset packed into tar shards by
               bin/longshore-pack (docs/packed-datasets.md), in that MinIO.
    ceiling    longshore-bench ceiling: one goroutine per core decoding and
               transforming the files from memory in a tight loop, no
               pipeline: what this machine can do with this decoder.
    py-client  examples/feed_server (the same pipeline, serving batches over
               the feed) + a Python loop over longshore.Loader, touching one
               byte of every batch through torch.from_numpy (no copy).

Figures, for each run:

    images/s       images of the epoch over the time from the loader's start to
                   the last batch (peer: ImageFolder scan + DataLoader + worker
                   start, after `import torch`; go: the node's own figure, from
                   its pipeline start; py-client: from feed_server's launch).
    steady img/s   images after the first batch over first -> last batch (the
                   Python loops only; the node reports no per-batch times).
    CPU-s/1000     user+system CPU of the whole process tree over the epoch,
                   per 1,000 images. peer: the trainer process from loader start
                   plus every worker (/proc/<pid>/stat before they stop); go:
                   the node's whole-process rusage; py-client: feed_server's
                   whole process plus the Python loop from its connect. The
                   JSON also has the whole-process-tree rusage of each run
                   (interpreter start and `import torch` included).
    peak PSS       proportional set size summed over the process tree
                   (/proc/<pid>/smaps_rollup, every 100 ms), so pages shared
                   between parent and workers, or between node and trainer
                   (the feed's memfd slots), count once. Both trainers import
                   torch; the JSON has the PSS of a bare `import torch,
                   torchvision, numpy` process; `loader PSS` is the peak less
                   that (an approximation of the loader's own memory).
    first batch    from the loader's start (as above) to the first batch in the
                   consumer's hands.

The machine's load average before and after is recorded: it is shared.
"""

import argparse
import json
import os
import resource
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


# --------------------------------------------------------------------------
# /proc helpers


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


class PSSSampler:
    """Samples the summed PSS of the trees under roots every interval seconds."""

    def __init__(self, interval=0.1):  # reading smaps_rollup costs the driver ~5% of a core at 50 ms
        self.roots, self.peak, self.interval = [], 0, interval
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def add(self, pid):
        self.roots.append(pid)

    def start(self):
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            pids = set()
            for r in list(self.roots):
                pids.update(tree(r))
            total = sum(pss_bytes(p) for p in pids)
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)

    def stop(self):
        self._stop.set()
        self._t.join()
        return self.peak


def wait_rusage(p):
    """Reap a Popen child with wait4: its CPU includes its reaped children."""
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return ru.ru_utime + ru.ru_stime


# --------------------------------------------------------------------------
# child: the peer (PyTorch DataLoader)


def child_peer(a):
    import warnings

    warnings.filterwarnings("ignore", message="This DataLoader will create")  # num_workers 4 on 2 cores is asked for
    import torch
    import torchvision.transforms as T
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    cpu0, t0 = self_cpu(), time.time()
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = ImageFolder(a.dataset, transform=tf)
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=a.workers,
                        persistent_workers=a.workers > 0)
    it = iter(loader)
    n = touched = 0
    t_first = None
    n_first = 0
    for images, labels in it:
        touched += int(images[0, 0, 0, 0])  # touch the data, as a trainer would
        n += images.shape[0]
        if t_first is None:
            t_first, n_first = time.time(), n
    t_last = time.time()
    workers = [w.pid for w in getattr(it, "_workers", [])]
    cpu = self_cpu() - cpu0 + sum(proc_cpu(w) for w in workers)
    out = dict(images=n, t0=t0, t_first=t_first, n_first=n_first, t_last=t_last, cpu_epoch=cpu,
               workers=len(workers), torch=torch.__version__)
    with open(a.out, "w") as f:
        json.dump(out, f)
    del it, loader  # joins the workers, so the parent's rusage includes them


# --------------------------------------------------------------------------
# child: the Python client loop


def child_client(a):
    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
    import torch  # a trainer has torch loaded, as the peer does

    import longshore

    open(a.imported, "w").close()  # the driver launches feed_server now
    while not os.path.exists(a.socket):
        time.sleep(0.002)
    cpu0 = self_cpu()
    loader = longshore.Loader(a.socket, release_previous=True, timeout=120)
    for _ in range(2000):  # the socket file appears just before listen()
        try:
            loader.welcome
            break
        except ConnectionRefusedError:
            time.sleep(0.002)
    n = touched = 0
    t_first = None
    n_first = 0
    for b in loader:
        x = torch.from_numpy(b.images)  # zero-copy view of the slot
        touched += int(x[0, 0, 0, 0])
        n += len(b)
        if t_first is None:
            t_first, n_first = time.time(), n
    t_last = time.time()
    cpu = self_cpu() - cpu0
    loader.close()
    with open(a.out, "w") as f:
        json.dump(dict(images=n, t_first=t_first, n_first=n_first, t_last=t_last, cpu_epoch=cpu), f)


def child_baseline(a):
    import numpy  # noqa: F401
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    open(a.out, "w").close()
    time.sleep(0.5)


# --------------------------------------------------------------------------
# driver


def run_peer(a, workers, tmp, rep):
    out = os.path.join(tmp, f"peer-{workers}-{rep}.json")
    s = PSSSampler()
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_peer", "--dataset", a.dataset,
                          "--workers", str(workers), "--out", out])
    s.add(p.pid)
    s.start()
    cpu_proc = wait_rusage(p)
    peak = s.stop()
    if p.returncode != 0:
        raise RuntimeError(f"peer num_workers={workers} exited {p.returncode}")
    with open(out) as f:
        r = json.load(f)
    n = r["images"]
    return dict(images=n,
                images_per_s=n / (r["t_last"] - r["t0"]),
                steady_images_per_s=(n - r["n_first"]) / (r["t_last"] - r["t_first"]),
                cpu_s_per_1000=1000 * r["cpu_epoch"] / n,
                cpu_s_per_1000_process=1000 * cpu_proc / n,
                peak_pss_bytes=peak,
                first_batch_s=r["t_first"] - r["t0"])


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
        raise RuntimeError(f"{what} exited {p.returncode}: {err.decode(errors='replace')}")
    return cpu_proc, peak


def run_go(a, tmp, rep, dataset=None, env=None, tag="go"):
    stats = os.path.join(tmp, f"{tag}-{rep}.json")
    cpu_proc, peak = run_measured([a.node, "--standalone", "--dataset", dataset or a.dataset, "--epochs", "1",
                                   "--batch-size", "32", "--transform", "train", "--seed", str(rep + 1), "--sink", "null",
                                   "--stats-json", stats, "--progress", "never"], "node", env)
    with open(stats) as f:
        r = json.load(f)
    n = r["images"]
    return dict(images=n, images_per_s=n / r["seconds"], steady_images_per_s=None,
                cpu_s_per_1000=1000 * cpu_proc / n, cpu_s_per_1000_process=1000 * cpu_proc / n,
                peak_pss_bytes=peak, first_batch_s=r["first_batch_seconds"])


def run_go_minio(a, tmp, rep, packed=False):
    env = os.environ.copy()
    env.update(e.split("=", 1) for e in a.minio["env"])
    if packed:
        return run_go(a, tmp, rep, dataset=a.minio["packed_url"], env=env, tag="go-minio-packed")
    return run_go(a, tmp, rep, dataset=a.minio["url"], env=env, tag="go-minio")


def run_ceiling(a, tmp, rep):
    out = os.path.join(tmp, f"ceiling-{rep}.json")
    cpu_proc, peak = run_measured([a.bench, "ceiling", "--dataset", a.dataset, "--json", out], "ceiling")
    with open(out) as f:
        r = json.load(f)
    n = r["images"]
    return dict(images=n, images_per_s=n / r["seconds"], steady_images_per_s=None,
                cpu_s_per_1000=1000 * cpu_proc / n, cpu_s_per_1000_process=1000 * cpu_proc / n,
                peak_pss_bytes=peak, first_batch_s=None)


def start_minio(a, tmp):
    ready = os.path.join(tmp, "minio.json")
    cmd = [a.bench, "serve-minio", "--dataset", a.dataset, "--ready", ready]
    if a.packed:
        cmd += ["--packed", a.packed]
    p = subprocess.Popen(cmd,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(ready):
        if p.poll() is not None:
            sys.exit(f"bench_peer: longshore-bench serve-minio exited {p.returncode}")
        time.sleep(0.1)
    with open(ready) as f:
        a.minio = json.load(f)
    return p


def run_client(a, tmp, rep):
    d = tempfile.mkdtemp(prefix="lsb", dir="/tmp")  # short: Unix socket paths are limited
    out, imported = os.path.join(tmp, f"client-{rep}.json"), os.path.join(d, "imported")
    sock = os.path.join(d, "rank-0.sock")
    s = PSSSampler()
    c = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_client", "--socket", sock,
                          "--imported", imported, "--out", out])
    s.add(c.pid)
    s.start()
    while not os.path.exists(imported):
        if c.poll() is not None:
            raise RuntimeError("client exited before importing")
        time.sleep(0.002)
    t0 = time.time()
    srv = subprocess.Popen([a.feed_server, "--dataset", a.dataset, "--dir", d, "--batch-size", "32",
                            "--transform", "train", "--epochs", "1", "--seed", str(rep + 1)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    s.add(srv.pid)
    cpu_c = wait_rusage(c)
    srv_cpu = proc_cpu(srv.pid)  # whole feed_server process, read before it stops
    srv.send_signal(signal.SIGTERM)
    err = srv.stderr.read()
    cpu_srv = wait_rusage(srv)
    peak = s.stop()
    if c.returncode != 0:
        raise RuntimeError(f"client exited {c.returncode}; feed_server said: {err.decode(errors='replace')}")
    with open(out) as f:
        r = json.load(f)
    n = r["images"]
    return dict(images=n,
                images_per_s=n / (r["t_last"] - t0),
                steady_images_per_s=(n - r["n_first"]) / (r["t_last"] - r["t_first"]),
                cpu_s_per_1000=1000 * (r["cpu_epoch"] + srv_cpu) / n,
                cpu_s_per_1000_server=1000 * srv_cpu / n,
                cpu_s_per_1000_client=1000 * r["cpu_epoch"] / n,
                cpu_s_per_1000_process=1000 * (cpu_c + cpu_srv) / n,
                peak_pss_bytes=peak,
                first_batch_s=r["t_first"] - t0)


def baseline_pss():
    out = tempfile.mktemp(prefix="lsb-base")
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "_baseline", "--out", out])
    while not os.path.exists(out) and p.poll() is None:
        time.sleep(0.01)
    v = pss_bytes(p.pid)
    p.wait()
    if os.path.exists(out):
        os.unlink(out)
    return v


def median_row(runs):
    m = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if r.get(k) is not None]
        m[k] = statistics.median(vals) if vals else None
    return m


def load():
    return os.getloadavg()


def driver(a):
    for path, what in ((a.node, "go build -o bin/longshore-node ./cmd/node"),
                       (a.feed_server, "go build -o bin/feed_server ./examples/feed_server"),
                       (a.bench, "go build -o bin/longshore-bench ./cmd/longshore-bench")):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench_peer: {path} missing: {what}")
    n_files = sum(1 for _, _, fs in os.walk(a.dataset) for f in fs if not f.startswith("."))
    configs = [f"peer-w{w}" for w in a.workers] + ["go", "py-client", "ceiling"]
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
        configs.insert(configs.index("py-client"), "go-minio")
        if a.packed:
            configs.insert(configs.index("py-client"), "go-minio-packed")
    runs = {c: [] for c in configs}
    load0, t_start = load(), time.time()
    try:
        run_all(a, configs, runs, tmp)
    finally:
        if minio is not None:
            minio.send_signal(signal.SIGTERM)
            minio.wait()
    report_all(a, configs, runs, n_files, load0, t_start)


def run_all(a, configs, runs, tmp):
    for rep in range(a.reps):
        for c in configs:
            if c.startswith("peer-w"):
                r = run_peer(a, int(c[6:]), tmp, rep)
            elif c == "go":
                r = run_go(a, tmp, rep)
            elif c in ("go-minio", "go-minio-packed"):
                r = run_go_minio(a, tmp, rep, packed=c == "go-minio-packed")
            elif c == "ceiling":
                r = run_ceiling(a, tmp, rep)
            else:
                r = run_client(a, tmp, rep)
            r["loadavg_1m"] = load()[0]
            runs[c].append(r)
            fb = "-" if r["first_batch_s"] is None else f"{r['first_batch_s']:.3f}"
            print(f"bench-peer: rep {rep + 1} {c:9s} {r['images_per_s']:6.0f} images/s, "
                  f"{r['cpu_s_per_1000']:.2f} CPU-s/1000, {r['peak_pss_bytes'] / 2**20:.0f} MiB PSS, "
                  f"first batch {fb} s (load {r['loadavg_1m']:.2f})", file=sys.stderr, flush=True)


def report_all(a, configs, runs, n_files, load0, t_start):
    rows = {c: median_row(runs[c]) for c in configs}
    best = max((c for c in configs if c.startswith("peer")), key=lambda c: rows[c]["images_per_s"])
    b = rows[best]
    for c in configs:
        m = rows[c]
        m["vs_peer_images_per_s"] = m["images_per_s"] / b["images_per_s"]
        m["vs_peer_cpu"] = m["cpu_s_per_1000"] / b["cpu_s_per_1000"]
        m["vs_peer_pss"] = m["peak_pss_bytes"] / b["peak_pss_bytes"]
        m["vs_peer_first_batch"] = None if m["first_batch_s"] is None else m["first_batch_s"] / b["first_batch_s"]
        if "ceiling" in rows:
            m["vs_ceiling_images_per_s"] = m["images_per_s"] / rows["ceiling"]["images_per_s"]
        for mc in ("go-minio", "go-minio-packed"):
            if mc in rows:
                rows[mc]["vs_local_images_per_s"] = rows[mc]["images_per_s"] / rows["go"]["images_per_s"]
    base = baseline_pss()
    for c in configs:  # the loader's own memory: less the trainer's `import torch` (Go processes have no trainer)
        m = rows[c]
        m["loader_pss_bytes"] = m["peak_pss_bytes"] - (0 if c in ("go", "go-minio", "go-minio-packed", "ceiling") else base)
    for c in configs:
        rows[c]["vs_peer_loader_pss"] = rows[c]["loader_pss_bytes"] / max(b["loader_pss_bytes"], 1)
    report = dict(
        machine=cpu_model(), cpus=os.cpu_count(), dataset=a.dataset, dataset_files=n_files,
        repetitions=a.reps, peer_best=best, started=time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_start)),
        seconds=round(time.time() - t_start, 1), loadavg_before=load0, loadavg_after=load(),
        trainer_import_pss_bytes=base,
        rows={c: dict(median=rows[c], runs=runs[c]) for c in configs})
    print_table(report, configs, rows)
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def print_table(rep, configs, rows):
    print(f"\nlongshore vs PyTorch DataLoader — {rep['machine']}, {rep['cpus']} CPUs; {rep['dataset_files']} JPEGs; "
          f"RandomResizedCrop(224)+flip, uint8, batch 32; medians of {rep['repetitions']}; "
          f"load avg {rep['loadavg_before'][0]:.2f} before, {rep['loadavg_after'][0]:.2f} after\n")
    hdr = ("config", "images/s", "steady img/s", "CPU-s/1000", "peak PSS", "loader PSS", "first batch",
           "img/s ×", "CPU ×", "PSS ×", "loader PSS ×", "× ceiling")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in hdr) + "|")
    for c in configs:
        m = rows[c]
        name = c + (" (peer best)" if c == rep["peer_best"] else "")
        steady = f"{m['steady_images_per_s']:.0f}" if m["steady_images_per_s"] else "-"
        fb = "-" if m["first_batch_s"] is None else f"{m['first_batch_s']:.3f} s"
        vc = m.get("vs_ceiling_images_per_s")
        vc = "-" if vc is None else f"{vc:.2f}"
        print(f"| {name} | {m['images_per_s']:.0f} | {steady} | {m['cpu_s_per_1000']:.2f} | "
              f"{m['peak_pss_bytes'] / 2**20:.0f} MiB | {m['loader_pss_bytes'] / 2**20:.0f} MiB | "
              f"{fb} | {m['vs_peer_images_per_s']:.2f} | {m['vs_peer_cpu']:.2f} | "
              f"{m['vs_peer_pss']:.2f} | {m['vs_peer_loader_pss']:.2f} | {vc} |")
    for mc in ("go-minio", "go-minio-packed"):
        if mc in rows:
            print(f"\n{mc} / go (MinIO path vs local path): {rows[mc]['vs_local_images_per_s']:.2f}", end="")
    print()
    print(f"\n(ratios to {rep['peer_best']}; loader PSS = peak PSS less a bare `import torch, torchvision, "
          f"numpy` process ({rep['trainer_import_pss_bytes'] / 2**20:.0f} MiB), which both Python trainers carry; "
          f"{rep['seconds']:.0f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", default="driver", choices=["driver", "_peer", "_client", "_baseline"])
    ap.add_argument("--dataset")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", default="0,1,2,4", help="peer num_workers to try (driver), or the one (child)")
    ap.add_argument("--node", default=os.path.join(REPO, "bin", "longshore-node"))
    ap.add_argument("--feed-server", default=os.path.join(REPO, "bin", "feed_server"))
    ap.add_argument("--bench", default=os.path.join(REPO, "bin", "longshore-bench"))
    ap.add_argument("--pack", default=os.path.join(REPO, "bin", "longshore-pack"),
                    help="the pack binary, for go-minio-packed (skipped when missing)")
    ap.add_argument("--no-minio", action="store_true", help="skip the go-minio configurations")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--out")
    ap.add_argument("--socket")
    ap.add_argument("--imported")
    a = ap.parse_args()
    if a.mode == "_peer":
        a.workers = int(a.workers)
        return child_peer(a)
    if a.mode == "_client":
        return child_client(a)
    if a.mode == "_baseline":
        return child_baseline(a)
    if not a.dataset:
        ap.error("--dataset is required")
    a.workers = [int(w) for w in a.workers.split(",")]
    driver(a)


if __name__ == "__main__":
    main()
