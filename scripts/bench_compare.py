#!/usr/bin/python3
"""bench_compare.py: the ratios between two benchmark result files (make bench-compare OLD=... NEW=...).

    /usr/bin/python3 scripts/bench_compare.py OLD.json NEW.json [--match REGEXP] [--all] [--flag 0.05]

Reads two results of the same benchmark (docs/bench/*.json, written by
scripts/bench_peer.py, scripts/bench_host.py or cmd/longshore-bench) and
prints, for every figure of the medians present in both, old, new and
new/old, marking a change beyond --flag (5%) as better or worse where the
figure has a direction (images/s up is better; CPU, memory and times down
are). Per-repetition runs and timelines are left out (use --all for every
numeric field). Both files' machine and load average are printed first:
ratios between runs on different machines or loads compare those too.
Exit status 2 when the files are of different benchmarks.
"""

import argparse
import json
import re
import sys

SKIP = {"runs", "pss_timeline", "machine", "loadavg_before", "loadavg_after", "loadavg_after_run", "node_argv",
        "paired_loader_steady", "repetitions", "rep", "started", "seconds", "duration", "cpus"}


def flatten(obj, prefix="", every=False):
    """(path, number) for each numeric leaf; lists of rows are keyed by
    their "config"."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not every and k in SKIP:
                continue
            out += flatten(v, f"{prefix}.{k}" if prefix else k, every)
    elif isinstance(obj, list):
        if obj and all(isinstance(x, dict) and "config" in x for x in obj):
            for x in obj:
                out += flatten({k: v for k, v in x.items() if k != "config"}, f"{prefix}[{x['config']}]", every)
        elif every:
            for i, x in enumerate(obj):
                out += flatten(x, f"{prefix}[{i}]", every)
    elif isinstance(obj, bool):
        pass
    elif isinstance(obj, (int, float)):
        out.append((prefix, float(obj)))
    return out


HIGHER = re.compile(r"images_per_s|images_per_second|vs_peer_images|vs_local|vs_ceiling|classes_per_batch")
LOWER = re.compile(r"cpu|pss|rss|first_batch|_s$|seconds|loader_|tree_")
NEITHER = re.compile(r"window|target|ranks|workers|processes|images_by|dataset|^images$|distinct")


def direction(path):
    """+1: higher is better, -1: lower is better, 0: neither."""
    leaf = path.rsplit(".", 1)[-1]
    if NEITHER.search(leaf):
        return 0
    if HIGHER.search(leaf):
        return 1
    if LOWER.search(leaf):
        return -1
    return 0


def describe(r):
    m = r.get("machine")
    if isinstance(m, dict):
        m = f"{m.get('cpu_model')}, {m.get('cpus')} CPUs"
    elif m is None:
        m = "?"
    else:
        m = f"{m}, {r.get('cpus')} CPUs"
    la = r.get("loadavg_before")
    la = f"load avg {la[0]:.2f} before" if la else "load avg not recorded"
    la2 = r.get("loadavg_after")
    if la2:
        la += f", {la2[0]:.2f} after"
    return f"{r.get('started', '?')}: {m}; {la}"


def kind(r):
    if "bench" in r:
        return r["bench"]
    if isinstance(r.get("rows"), list):
        return "bench"  # cmd/longshore-bench
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--match", help="only figures whose path matches this regexp")
    ap.add_argument("--all", action="store_true", help="every numeric field, runs included")
    ap.add_argument("--flag", type=float, default=0.05, help="mark changes beyond this fraction")
    a = ap.parse_args()
    with open(a.old) as f:
        old = json.load(f)
    with open(a.new) as f:
        new = json.load(f)
    if kind(old) != kind(new):
        print(f"bench_compare: {a.old} is {kind(old)}, {a.new} is {kind(new)}: not comparable", file=sys.stderr)
        return 2
    print(f"old {a.old}: {describe(old)}")
    print(f"new {a.new}: {describe(new)}\n")
    o = dict(flatten(old, every=a.all))
    n = dict(flatten(new, every=a.all))
    pat = re.compile(a.match) if a.match else None
    paths = [p for p in o if p in n and (pat is None or pat.search(p))]
    if not paths:
        print("no figures in common")
        return 1
    w = max(len(p) for p in paths)
    print(f"{'figure':{w}s}  {'old':>12s}  {'new':>12s}  {'new/old':>8s}")
    for p in paths:
        ov, nv = o[p], n[p]
        if ov == 0:
            print(f"{p:{w}s}  {ov:12.4g}  {nv:12.4g}  {'-' if nv == 0 else 'new':>8s}")
            continue
        ratio = nv / ov
        mark = ""
        d = direction(p)
        if d and abs(ratio - 1) > a.flag:
            mark = "  better" if (ratio > 1) == (d > 0) else "  WORSE"
        print(f"{p:{w}s}  {ov:12.4g}  {nv:12.4g}  {ratio:8.3f}{mark}")
    only_old = [p for p in o if p not in n and (pat is None or pat.search(p))]
    only_new = [p for p in n if p not in o and (pat is None or pat.search(p))]
    if only_old or only_new:
        print(f"\n({len(only_old)} figures only in old, {len(only_new)} only in new)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
