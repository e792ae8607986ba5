#!/usr/bin/python3
"""bench_host.py: loader memory at the scale of an 8-GPU host (make bench-host, issue 19).

    /usr/bin/python3 scripts/bench_host.py --source DIR [--samples 100000] [--reps 2] [--window 60]
                                           [--epochs 100] [--step-ms 0] [--node-args "--memory-budget 512MiB"]
                                           [--json docs/bench/bench-host.json]

A benchmark, not a test: it measures memory, not speed (on 2 cores the
throughput of 64 worker processes means nothing; their memory does).

    peer       8 trainer processes, each `import torch, torchvision`, each
               a PyTorch DataLoader over torchvision ImageFolder with
               num_workers=8 (persistent workers, shuffle=True, batch 32,
               RandomResizedCrop(224) + flip + PILToTensor): 8 + 64
               processes, each trainer with its own copy of the sample list
               and each worker touching its parent's copy (copy-on-access).
    longshore  one bin/longshore-node --standalone --ranks 8 --sink feed
               --block 1 (full shuffle) over the same directory, and 8
               Python trainers (`import torch, longshore`), one per rank,
               iterating longshore.Loader on the rank's socket.

Both read the same ImageFolder dataset of --samples entries (default
100,000): hard links into the files of --source (a real-photo set made by
scripts/dataset.sh), spread over 100 class directories, so each side
holds 100,000 paths as a real job would, while the page cache holds only
the source's files.

What a user runs: --epochs (default 100) is the job's length on both
sides (the node's --epochs; the peer's trainers iterate that many epochs
of their DataLoader), so whatever the loader keeps per epoch or ahead of
time shows; --step-ms makes every trainer a model slower than the
pipeline (it sleeps that long a batch, with the batch held), so what the
loader buffers while the trainer lags shows; --node-args adds flags to
the node (--memory-budget).

Each run: the 8 trainers start and import; when all have, the tree's PSS
is the trainers' own imports (`import PSS`, shown separately; it is the
same torch on both sides, counted once per trainer process); then the
loaders start; once every trainer has its first batch, a --window of
seconds follows. PSS (smaps_rollup, summed over every process of the
tree, so shared pages count once) is sampled every second: `peak` is the
maximum from the loaders' start to the window's end, `steady` the median
over the window. `loader` = that less the import PSS: the memory the data
loading itself costs. The sides alternate, --reps times. Target (issue
19): longshore's loader PSS <= 0.25x the peer's.
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_peer import BenchError, PSSSampler, load, machine, touch, wait_file  # noqa: E402

CLASSES = 100


# --------------------------------------------------------------------------
# the dataset


def host_dataset(source, n, cache):
    """An ImageFolder directory of n hard links into source's files, made
    once (a .complete marker)."""
    out = os.path.join(cache, f"host-n{n}-{os.path.basename(os.path.normpath(source))}")
    if os.path.exists(os.path.join(out, ".complete")):
        return out
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(source) for f in fs if not f.startswith("."))
    if not files:
        sys.exit(f"bench_host: no files in {source}")
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    per = (n + CLASSES - 1) // CLASSES
    for i in range(n):
        c = i // per
        d = os.path.join(tmp, f"c{c:03d}")
        if i % per == 0:
            os.makedirs(d)
        src = files[i % len(files)]
        os.link(src, os.path.join(d, f"{i:06d}{os.path.splitext(src)[1]}"))
    touch(os.path.join(tmp, ".complete"))
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out


# --------------------------------------------------------------------------
# children: the trainers


def child_peer(a):
    import warnings

    warnings.filterwarnings("ignore", message="This DataLoader will create")  # 8 workers on 2 cores is asked for
    import torch
    import torchvision  # noqa: F401
    import torchvision.transforms as T
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    touch(a.imported)
    while not os.path.exists(a.go):
        time.sleep(0.01)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.PILToTensor()])
    ds = ImageFolder(a.dataset, transform=tf)
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=a.workers, persistent_workers=True)
    n = touched = 0
    for _ in range(a.epochs):
        for images, _ in loader:
            touched += int(images[0, 0, 0, 0])
            n += images.shape[0]
            if n == images.shape[0]:
                touch(a.first)
            if a.step_ms:
                time.sleep(a.step_ms / 1000)
            if os.path.exists(a.stop):
                break
        if os.path.exists(a.stop):
            break
    with open(a.out, "w") as f:
        json.dump(dict(images=n, dataset_samples=len(ds), torch=torch.__version__), f)
    os._exit(0)  # the driver ends the workers with the process group


def child_client(a):
    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
    import torch

    import longshore

    touch(a.imported)
    while not os.path.exists(a.socket):
        time.sleep(0.01)
    loader = longshore.Loader(a.socket, release_previous=True, timeout=600)
    for _ in range(30000):
        try:
            loader.welcome
            break
        except (ConnectionRefusedError, FileNotFoundError):
            time.sleep(0.01)
    n = touched = failed = 0
    for b in loader:
        x = torch.from_numpy(b.images)
        touched += int(x[0, 0, 0, 0])
        n += len(b)
        failed += b.failed
        if n == len(b):
            touch(a.first)
        if a.step_ms:
            time.sleep(a.step_ms / 1000)
        if os.path.exists(a.stop):
            break
    loader.close()
    with open(a.out, "w") as f:
        json.dump(dict(images=n, failures=failed, torch=torch.__version__), f)


# --------------------------------------------------------------------------
# driver


def kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_side(a, side, rep):
    what = f"{side} rep {rep + 1}"
    d = tempfile.mkdtemp(prefix="lsh", dir="/tmp")  # short: Unix socket paths are limited
    go, stop = os.path.join(d, "go"), os.path.join(d, "stop")
    s = PSSSampler(interval=1.0)
    trainers, node = [], None
    try:
        for r in range(a.ranks):
            argv = [sys.executable, os.path.abspath(__file__), "_" + side, "--dataset", a.dataset, "--workers", str(a.workers),
                    "--imported", os.path.join(d, f"imported-{r}"), "--first", os.path.join(d, f"first-{r}"),
                    "--out", os.path.join(d, f"out-{r}.json"), "--go", go, "--stop", stop,
                    "--epochs", str(a.epochs), "--step-ms", str(a.step_ms),
                    "--socket", os.path.join(d, f"rank-{r}.sock")]
            p = subprocess.Popen(argv, start_new_session=True)  # its own group: its workers die with it
            trainers.append(p)
            s.add(p.pid)
        for r in range(a.ranks):
            wait_file(os.path.join(d, f"imported-{r}"), trainers, what, limit=600)
        import_pss, procs0 = s.now()
        s.start()
        t_go = time.time()
        if side == "peer":
            touch(go)
        else:
            node_argv = [a.node, "--standalone", "--ranks", str(a.ranks), "--sink", "feed", "--feed-dir", d,
                         "--dataset", a.dataset, "--epochs", str(a.epochs), "--batch-size", "32", "--transform", "train",
                         "--block", "1", "--seed", str(rep + 1), "--progress", "never",
                         "--stats-json", os.path.join(d, "stats.json")] + a.node_args.split()
            node = subprocess.Popen(node_argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True)
            s.add(node.pid)
        procs = trainers + ([node] if node else [])
        for r in range(a.ranks):
            wait_file(os.path.join(d, f"first-{r}"), procs, what, limit=900)
        t_first = time.time()
        print(f"bench-host: {what}: every trainer has its first batch after {t_first - t_go:.0f} s; "
              f"window of {a.window} s", file=sys.stderr, flush=True)
        time.sleep(a.window)
        t_end = time.time()
        touch(stop)
        t_limit = time.time() + max(10, a.window)
        for p in trainers:  # each stops after its next batch
            try:
                p.wait(timeout=max(0.1, t_limit - time.time()))
            except subprocess.TimeoutExpired:
                pass
        s.stop()
        outs = []
        for r in range(a.ranks):
            path = os.path.join(d, f"out-{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    outs.append(json.load(f))
        failures = sum(o.get("failures", 0) for o in outs)
        if failures:
            raise BenchError(f"{what}: {failures} failed samples")
        node_err = ""
        if node is not None:
            node.send_signal(signal.SIGTERM)
            try:
                node_err = node.communicate(timeout=60)[1].decode(errors="replace")
            except subprocess.TimeoutExpired:
                pass
            if node.returncode not in (0, None):
                raise BenchError(f"{what}: the node exited {node.returncode}: {node_err[-2000:]}")
        samples = [(t, v) for t, v, _ in s.samples if t_go <= t <= t_end]
        peak = max(v for _, v in samples)
        steady = s.steady(t_first, t_end)
        images = sum(o["images"] for o in outs)
        return dict(rep=rep + 1, import_pss_bytes=import_pss, import_processes=procs0,
                    peak_pss_bytes=peak, steady_pss_bytes=steady,
                    loader_peak_pss_bytes=peak - import_pss, loader_steady_pss_bytes=steady - import_pss,
                    processes=s.max_procs(), start_to_first_batches_s=t_first - t_go,
                    window_s=t_end - t_first, images_by_trainers=images, trainers_reported=len(outs),
                    pss_timeline=[(round(t - t_go, 1), v) for t, v in samples],
                    node_argv=node_argv[1:] if node is not None else None, loadavg_after=load())
    finally:
        for p in trainers + ([node] if node else []):
            kill_group(p)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(d, ignore_errors=True)


def mib(v):
    return f"{v / 2**20:.0f} MiB"


def driver(a):
    if not os.access(a.node, os.X_OK):
        sys.exit(f"bench_host: {a.node} missing: go build -o bin/longshore-node ./cmd/node")
    cache = os.environ.get("LONGSHORE_CACHE", os.path.expanduser("~/.cache/longshore"))
    a.dataset = host_dataset(a.source, a.samples, os.path.join(cache, "datasets"))
    runs = {"peer": [], "longshore": []}
    load0, t0 = load(), time.time()
    try:
        for rep in range(a.reps):
            for side in ("peer", "longshore"):
                r = run_side(a, "peer" if side == "peer" else "client", rep)
                runs[side].append(r)
                print(f"bench-host: rep {rep + 1} {side:9s}: {r['processes']} processes; import PSS {mib(r['import_pss_bytes'])}; "
                      f"peak {mib(r['peak_pss_bytes'])}, steady {mib(r['steady_pss_bytes'])}; loader peak "
                      f"{mib(r['loader_peak_pss_bytes'])}, steady {mib(r['loader_steady_pss_bytes'])} "
                      f"(load {r['loadavg_after'][0]:.2f})", file=sys.stderr, flush=True)
    except BenchError as e:
        sys.exit(f"bench_host: INVALID RUN: {e}")
    med = {side: {k: statistics.median(r[k] for r in rs) for k in
                  ("import_pss_bytes", "peak_pss_bytes", "steady_pss_bytes", "loader_peak_pss_bytes",
                   "loader_steady_pss_bytes", "processes", "images_by_trainers")}
           for side, rs in runs.items()}
    ratio = dict(loader_peak=med["longshore"]["loader_peak_pss_bytes"] / med["peer"]["loader_peak_pss_bytes"],
                 loader_steady=med["longshore"]["loader_steady_pss_bytes"] / med["peer"]["loader_steady_pss_bytes"],
                 tree_peak=med["longshore"]["peak_pss_bytes"] / med["peer"]["peak_pss_bytes"],
                 tree_steady=med["longshore"]["steady_pss_bytes"] / med["peer"]["steady_pss_bytes"])
    paired = [l["loader_steady_pss_bytes"] / p["loader_steady_pss_bytes"] for p, l in zip(runs["peer"], runs["longshore"])]
    report = dict(bench="bench-host", machine=machine(), dataset=a.dataset, dataset_samples=a.samples,
                  source=a.source, ranks=a.ranks, epochs=a.epochs, step_ms=a.step_ms, node_args=a.node_args, peer_workers_per_trainer=a.workers, window_s=a.window,
                  repetitions=a.reps, started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
                  seconds=round(time.time() - t0, 1), loadavg_before=load0, loadavg_after=load(),
                  median=med, longshore_vs_peer=ratio, paired_loader_steady=paired,
                  target_loader_ratio=0.25, runs=runs)
    m = report["machine"]
    print(f"\nloader memory at host scale — {m['cpu_model']}, {m['cpus']} CPUs; {a.samples} samples "
          f"(hard links into {a.source}); {a.ranks} trainers; --epochs {a.epochs}, a step of {a.step_ms} ms a batch; medians of {a.reps}; window {a.window} s; "
          f"load avg {load0[0]:.2f} before, {report['loadavg_after'][0]:.2f} after\n")
    print(f"| side | processes | import PSS ({a.ranks} trainers) | peak PSS | steady PSS | loader peak | loader steady |")
    print("|---|---|---|---|---|---|---|")
    for side, name in (("peer", f"peer: {a.ranks} × DataLoader(num_workers={a.workers})"),
                       ("longshore", f"longshore: one node --ranks {a.ranks} --sink feed + {a.ranks} Python trainers")):
        x = med[side]
        print(f"| {name} | {x['processes']:.0f} | {mib(x['import_pss_bytes'])} | {mib(x['peak_pss_bytes'])} | "
              f"{mib(x['steady_pss_bytes'])} | {mib(x['loader_peak_pss_bytes'])} | {mib(x['loader_steady_pss_bytes'])} |")
    print(f"\nlongshore / peer: loader peak {ratio['loader_peak']:.3f}×, loader steady {ratio['loader_steady']:.3f}× "
          f"(target ≤ 0.25×; paired steady, rep by rep: {', '.join(f'{v:.3f}' for v in paired)}); "
          f"whole trees, torch included: peak {ratio['tree_peak']:.2f}×, steady {ratio['tree_steady']:.2f}×")
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", nargs="?", default="driver", choices=["driver", "_peer", "_client"])
    ap.add_argument("--source", help="a real-photo ImageFolder directory (scripts/dataset.sh N)")
    ap.add_argument("--samples", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--window", type=float, default=60, help="seconds measured once every trainer has a batch")
    ap.add_argument("--ranks", type=int, default=8, help="trainers (GPUs) on the host")
    ap.add_argument("--workers", type=int, default=8, help="the peer's num_workers per trainer")
    ap.add_argument("--epochs", type=int, default=100, help="epochs of the job on both sides (what a user runs: not one)")
    ap.add_argument("--step-ms", type=float, default=0, help="each trainer's compute a batch, in ms: > 0 makes trainers slower than the loader")
    ap.add_argument("--node-args", default="", help="more flags for the node, like '--memory-budget 512MiB'")
    ap.add_argument("--node", default=os.path.join(REPO, "bin", "longshore-node"))
    ap.add_argument("--json", help="write the report here")
    for f in ("--dataset", "--imported", "--first", "--out", "--go", "--stop", "--socket"):
        ap.add_argument(f)
    a = ap.parse_args()
    if a.mode == "_peer":
        return child_peer(a)
    if a.mode == "_client":
        return child_client(a)
    if not a.source:
        ap.error("--source is required")
    if a.samples < 1:
        ap.error("--samples must be positive")
    if a.epochs < 1 or a.step_ms < 0:
        ap.error("--epochs must be positive and --step-ms not negative")
    driver(a)


if __name__ == "__main__":
    main()
