#!/usr/bin/python3
"""bench_stall.py: a real run's data-stall share before and after tuning.

One `longshore-node --standalone --sink feed` and one Python trainer
(`longshore.Loader`, the path users run) that "computes" --step-ms a batch
(a sleep, as a GPU step leaves the CPU to the loader). Each config starts
the node afresh; the trainer reads for --seconds and the share of its time
spent waiting for batches (`loader.stall`) is taken over the last
--measure seconds, by the stall tally's differences. Configs alternate,
--reps times each:

    /usr/bin/python3 scripts/bench_stall.py --dataset "$(scripts/dataset.sh 4000)" \\
        --config "--decoders 1" --config "--decoders 1 --autotune" --json out.json

The node's autotune changes (msg=autotune) are counted from its log.
"""

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))
import longshore  # noqa: E402


def one(args, config):
    d = tempfile.mkdtemp(prefix="bench-stall-")
    feed = os.path.join(d, "feed")
    log = open(os.path.join(d, "node.log"), "w+")
    argv = [args.node, "--standalone", "--dataset", args.dataset, "--sink", "feed", "--feed-dir", feed,
            "--epochs", "100", "--batch-size", str(args.batch_size), "--size", str(args.size), "--transform", "train",
            "--progress", "never", *shlex.split(config)]
    node = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, LONGSHORE_LOG_FORMAT="text"))
    try:
        sock = os.path.join(feed, "rank-0.sock")
        deadline = time.monotonic() + 60
        while not os.path.exists(sock):
            if node.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise SystemExit(f"the node did not start:\n{log.read()}")
            time.sleep(0.05)
        loader = longshore.Loader(sock, timeout=120)
        t0 = time.monotonic()
        mark, images, marked_images = None, 0, 0
        for batch in loader.batches():  # every epoch's, not one epoch's as `for batch in loader`
            images += len(batch)
            batch.release()
            time.sleep(args.step_ms / 1000)
            now = time.monotonic()
            if mark is None and now - t0 >= args.seconds - args.measure:
                st = loader.stall
                mark, marked_images, t_mark = (st.steps, st.wait, st.compute), images, now
            if now - t0 >= args.seconds:
                break
        st = loader.stall
        steps, wait, compute = st.steps - mark[0], st.wait - mark[1], st.compute - mark[2]
        elapsed = time.monotonic() - t_mark
        loader.close()
    finally:
        node.kill()
        node.wait()
    log.seek(0)
    text = log.read()
    log.close()
    shutil.rmtree(d, ignore_errors=True)
    tunes = [line for line in text.splitlines() if "msg=autotune " in line]
    return {"config": config, "share": wait / (wait + compute) if wait + compute > 0 else 0.0, "steps": steps,
            "wait_s": wait, "compute_s": compute, "images_per_s": (images - marked_images) / elapsed,
            "autotune_changes": len(tunes), "last_autotune": tunes[-1] if tunes else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--node", default=os.path.join(HERE, "..", "bin", "longshore-node"))
    ap.add_argument("--config", action="append", required=True, help="the node's flags for one side (repeat)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=60, help="each run's length")
    ap.add_argument("--measure", type=float, default=20, help="the last seconds of a run that are measured")
    ap.add_argument("--step-ms", type=float, default=60, help="the trainer's compute a batch (a sleep)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--json")
    args = ap.parse_args()
    runs = []
    for rep in range(args.reps):
        for config in args.config:
            r = one(args, config)
            r["rep"] = rep
            runs.append(r)
            print(f"rep {rep} [{config}]: waited {r['share']:.1%} of {r['steps']} steps, {r['images_per_s']:.0f} images/s, "
                  f"{r['autotune_changes']} autotune changes {r['last_autotune'][-120:]}", flush=True)
    summary = {}
    for config in args.config:
        mine = [r for r in runs if r["config"] == config]
        summary[config] = {"share_median": statistics.median(r["share"] for r in mine),
                           "images_per_s_median": statistics.median(r["images_per_s"] for r in mine)}
        print(f"[{config}]: stall share {summary[config]['share_median']:.1%}, "
              f"{summary[config]['images_per_s_median']:.0f} images/s (medians of {len(mine)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": vars(args),
                       "load_average": os.getloadavg(), "cpus": os.cpu_count(), "runs": runs, "summary": summary}, f, indent=1)


if __name__ == "__main__":
    main()
