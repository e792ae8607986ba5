#!/usr/bin/env python3
"""The trainer of scripts/gpu-check.sh: a ResNet-50 forward+backward loop
on the GPU fed by the longshore Python client, reporting how often the GPU
waited on data.

  --mode host       Loader(pin_memory=True): batch.cuda() copies from the
                    page-locked shared memory, non_blocking, on the stream
  --mode device     Loader(device="cuda"): batch.cuda() is the node's device
                    slot (CUDA IPC), no copy
  --mode synthetic  no loader: one batch already on the GPU (the ceiling)

Waiting is measured on the GPU's own timeline, with CUDA events: for step
i, `starved` is the time between the end of step i-1's optimizer step and
the moment the trainer had step i's batch in hand (an event recorded right
after next_batch()): the GPU was idle because no data was there to enqueue
work for. `transfer` is the time from that event to the start of the
forward pass (the copy and the uint8->float conversion, on the stream). A
step "waited on data" when starved > --wait-ms. Every step is recorded;
the first --warmup are left out of the figures.

--device cpu runs the same loop on the CPU with a tiny model and wall-clock
timing: a check of the plumbing on a machine without a GPU, nothing more.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(HERE, "..", "clients", "python"), os.path.join(HERE, "python")):
    if os.path.isdir(os.path.join(p, "longshore")):
        sys.path.insert(0, p)


def model_for(args, torch):
    if args.device == "cpu":
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.AdaptiveAvgPool2d(1),
                                   torch.nn.Flatten(), torch.nn.Linear(8, 1000))
    try:
        import torchvision

        m = torchvision.models.resnet50(weights=None)
    except ImportError:
        sys.exit("gpu_train_check: torchvision is needed for the ResNet-50 (pip/apt torchvision)")
    return m.to(args.device, memory_format=torch.channels_last)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", help="the rank's feed socket")
    ap.add_argument("--mode", choices=["host", "device", "synthetic"], default="host")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=128, help="synthetic mode's batch; else the node's")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--wait-ms", type=float, default=1.0)
    ap.add_argument("--json")
    args = ap.parse_args()

    import torch

    gpu = args.device != "cpu"
    torch.backends.cudnn.benchmark = True
    model = model_for(args, torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    mean = torch.tensor([0.485, 0.456, 0.406], device=args.device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=args.device).view(1, 3, 1, 1) * 255

    loader = None
    if args.mode != "synthetic":
        import longshore

        kw = {"pin_memory": gpu} if args.mode == "host" else {"device": "cuda"}
        if not gpu:
            kw = {}
        loader = longshore.Loader(args.socket, timeout=120, **kw)
        w = loader.welcome
        print(f"gpu_train_check: {args.mode}: delivery {w.get('delivery')}, device {w.get('device')}, "
              f"batch {w['batch_size']}", file=sys.stderr)
        if args.mode == "device" and w.get("delivery") != "cuda_ipc":
            sys.exit("gpu_train_check: the node does not export device batches (run it with --upload device)")
        batches = loader.batches()
    else:
        fixed = torch.randint(0, 256, (args.batch_size, 3, args.size, args.size), dtype=torch.uint8, device=args.device)
        fixed_y = torch.randint(0, 1000, (args.batch_size,), device=args.device)

    def now_event():
        if gpu:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def elapsed(a, b):
        return a.elapsed_time(b) if gpu else (b - a) * 1e3

    marks = []  # per step: (had_data, compute_start, step_end)
    n_images = 0
    prev_end = None
    t0 = time.perf_counter()
    for step in range(args.steps):
        if step == args.warmup:
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            n_images = 0
        if loader is None:
            x8, y = fixed, fixed_y
            had = now_event()
        else:
            b = next(batches)
            had = now_event()
            x8 = b.cuda() if gpu else b.tensor()
            y = torch.from_numpy(b.labels)
            if gpu:  # pinned, or the pageable copy would sync the stream every step
                y = y.pin_memory().to(args.device, non_blocking=True)
        x = x8.float().sub_(mean).div_(std)
        if gpu:
            x = x.contiguous(memory_format=torch.channels_last)
        start = now_event()
        with torch.autocast(device_type="cuda" if gpu else "cpu", dtype=torch.bfloat16, enabled=gpu):
            loss = lossf(model(x), y % 1000)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end = now_event()
        if loader is not None:
            b.release()  # after the step's work is enqueued: held back until it has run
        marks.append((prev_end, had, start, end))
        prev_end = end
        n_images += x8.shape[0]
    if gpu:
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    starved, transfer, compute = [], [], []
    for prev, had, start, end in marks[args.warmup:]:
        starved.append(max(0.0, elapsed(prev, had)) if prev is not None else 0.0)
        transfer.append(elapsed(had, start))
        compute.append(elapsed(start, end))
    waited = sum(1 for s in starved if s > args.wait_ms)
    n = len(starved)
    row = {
        "mode": args.mode, "device": args.device, "steps": n, "batch": int(marks and x8.shape[0] or 0),
        "images_per_s": n_images / wall if wall > 0 else 0,
        "waited_steps": waited, "waited_share": waited / n if n else 0, "wait_threshold_ms": args.wait_ms,
        "starved_ms_mean": sum(starved) / n if n else 0, "starved_ms_max": max(starved or [0]),
        "transfer_ms_mean": sum(transfer) / n if n else 0, "compute_ms_mean": sum(compute) / n if n else 0,
        "compute_ms_median": sorted(compute)[n // 2] if n else 0,
    }
    if loader is not None:
        loader.close()
    out = json.dumps(row, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(out + "\n")
    print(out)


if __name__ == "__main__":
    main()
