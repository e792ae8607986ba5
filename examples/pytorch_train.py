#!/usr/bin/python3
"""Train torchvision's ResNet-18 on batches from longshore, with commits and resume.

A node (or examples/feed_server) serves each rank's batches over a Unix
socket; this trainer maps them (no copy), trains, and every --commit-every
steps saves a checkpoint: the model and optimizer in model.pt, and beside it
each rank's loader position (loader.state_dict(), which commits at the node)
in loader-rank<R>-step<S>.json. --resume continues from the newest model
checkpoint with exactly the batches after it, even if the trainer was
killed.

    go run ./examples/feed_server --dataset "$(scripts/dataset.sh 512)" --dir /tmp/lsfeed &
    LONGSHORE_FEED_DIR=/tmp/lsfeed /usr/bin/python3 examples/pytorch_train.py --steps 20 --ckpt /tmp/ckpt
    LONGSHORE_FEED_DIR=/tmp/lsfeed /usr/bin/python3 examples/pytorch_train.py --steps 40 --ckpt /tmp/ckpt --resume

Cluster mode (a node started with --join ... --sink feed): commits block
until the coordinator acknowledges them. When the coordinator restarts or
the node is evicted, the loader raises longshore.RolledBack naming the
rank's last acknowledged commit (epoch, step, token); the trainer restores
the checkpoint saved with that commit (model.pt and the loader file whose
token it names; none: the model it started with) and reads on: the next
batches continue right after that commit. Under DDP every rank must roll
back to the same checkpoint (a coordinator restart rolls back every rank;
a rollback of one node's ranks alone needs the job restarted with the
coordinator's --resume), and the token saved in the loader files is the
job-wide cut (longshore.cut_token) of the ranks' tokens.

DDP: start the node with --ranks N and the trainer with torchrun
(torchrun --nproc-per-node N examples/pytorch_train.py ...): each process
reads LOCAL_RANK (its socket), joins the process group (gloo on CPU, nccl
on GPUs) and wraps the model in DistributedDataParallel. Rank 0 writes
model.pt after every rank has written its loader position. The batches
come through longshore.ddp.next_batch, which in cluster mode makes the
ranks agree at every step whether any of them rolled back (one small
all-reduce), so that all restore at the same step and the same commit; a
checkpoint whose commit some ranks got acknowledged and others not (the
coordinator died between them) cannot be rolled back to in place: every
rank raises longshore.ddp.Diverged, and the job is restarted with
longshore-coordinator --resume and the previous checkpoint's token.

A sample that fails to load does not shrink its batch: the node fills its
place with a copy of another sample of the batch, and batch.valid (a bool
tensor) leaves those rows out of the loss.
"""

import argparse
import copy
import glob
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision

try:
    import longshore
except ImportError:  # run from a checkout without `pip install ./clients/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
    import longshore
from longshore import ddp

# ImageNet's channel statistics, scaled to uint8.
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="train until this many optimizer steps in all")
    ap.add_argument("--commit-every", type=int, default=10, help="checkpoint and commit every N steps")
    ap.add_argument("--ckpt", default="checkpoints", help="checkpoint directory")
    ap.add_argument("--resume", action="store_true", help="continue from the newest checkpoint in --ckpt")
    ap.add_argument("--socket", help="feed socket (default: rank $LOCAL_RANK in $LONGSHORE_FEED_DIR)")
    ap.add_argument("--num-classes", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--headspace", type=int, default=0,
                    help="after training, this many steps on 4 cached batches replayed with no wait for data: "
                         "the trainer's compute ceiling, and the gain a perfect loader would give (0: none)")
    return ap.parse_args(argv)


def atomic_write(path, write):
    tmp = path + ".tmp"
    write(tmp)
    os.replace(tmp, path)


def loader_state_path(ckpt, rank, step):
    return os.path.join(ckpt, f"loader-rank{rank}-step{step}.json")


def save(args, rank, world, step, model, opt, loader):
    """Commit this rank's position at the node, write it beside the model
    checkpoint, then (rank 0, once every rank has) the model itself. A crash
    anywhere leaves the previous model.pt and its loader files intact, and
    a newer loader file without a model.pt naming it is never used."""
    sd = loader.state_dict()  # commits the last batch handed out at the node (cluster mode: RolledBack if it cannot)
    sd = {k: v.hex() if isinstance(v, bytes) else v for k, v in sd.items()}
    atomic_write(loader_state_path(args.ckpt, rank, step), lambda p: json.dump(sd, open(p, "w")))
    if world > 1:
        dist.barrier()
    if rank == 0:
        net = model.module if hasattr(model, "module") else model
        atomic_write(os.path.join(args.ckpt, "model.pt"),
                     lambda p: torch.save({"step": step, "model": net.state_dict(), "opt": opt.state_dict()}, p))
        # keep the loader files of this checkpoint only
        for f in glob.glob(os.path.join(args.ckpt, "loader-rank*-step*.json")):
            if not f.endswith(f"-step{step}.json"):
                os.unlink(f)
    if world > 1:
        dist.barrier()


def checkpoint(args, rank, world, step, model, opt, loader):
    try:
        save(args, rank, world, step, model, opt, loader)
    except longshore.RolledBack:
        # the commit's batch belongs to a delivery era that ended: nothing
        # is saved; the next read reports the rollback and restores
        print(f"rank {rank}: checkpoint at step {step} rolled back", flush=True)
        return False
    print(f"rank {rank}: checkpoint at step {step}", flush=True)
    return True


def restore(args, rank, model, opt, rb, initial, device):
    """Roll back to the checkpoint of rb (a longshore.RolledBack): model.pt
    and this rank's loader file, which must hold the commit rb names;
    rb.committed False: the state this run started from. Returns the step."""
    net = model.module if hasattr(model, "module") else model
    if not rb.committed:
        net.load_state_dict(initial["model"])
        opt.load_state_dict(initial["opt"])
        return initial["step"]
    ck = torch.load(os.path.join(args.ckpt, "model.pt"), map_location=device)
    with open(loader_state_path(args.ckpt, rank, ck["step"])) as f:
        sd = json.load(f)
    mine = sd.get("rank_token") or sd.get("token")
    if mine != rb.token.hex():
        raise RuntimeError(f"rollback to epoch {rb.epoch} step {rb.step}, but the newest checkpoint "
                           f"(step {ck['step']}) holds another commit; restart the job from a checkpoint")
    net.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    return ck["step"]


def main(argv=None):
    args = parse_args(argv)
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(f"cuda:{rank}" if torch.cuda.is_available() else "cpu")
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.ckpt, exist_ok=True)

    model = torchvision.models.resnet18(num_classes=args.num_classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    loader = longshore.Loader(args.socket if args.socket else rank, timeout=300)

    step = 0
    if args.resume and os.path.exists(os.path.join(args.ckpt, "model.pt")):
        ck = torch.load(os.path.join(args.ckpt, "model.pt"), map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["step"]
        with open(loader_state_path(args.ckpt, rank, step)) as f:
            sd = json.load(f)
        loader.load_state_dict({k: bytes.fromhex(v) if k.endswith("token") and v else v for k, v in sd.items()})
        print(f"rank {rank}: resumed at step {step} (loader after epoch {sd.get('epoch')} step {sd.get('step')})",
              flush=True)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if device.type == "cuda" else None)
    mean, std = MEAN.to(device), STD.to(device)
    net = model.module if hasattr(model, "module") else model
    def train_step(batch):
        x = batch.tensor()  # uint8 view of the shared slot: no copy
        if batch.layout == "NHWC":
            x = x.permute(0, 3, 1, 2)
        # to(device) on GPU, or the float conversion on CPU, makes the one copy
        x = (x.to(device, non_blocking=True).float() - mean) / std
        y = torch.from_numpy(batch.labels).to(device)
        valid = batch.valid.to(device)  # False at rows filled in failed samples' places
        batch.release()  # the pixels are in x now: the slot goes back to the node
        loss = (F.cross_entropy(model(x), y, reduction="none") * valid).sum() / valid.sum().clamp(min=1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    # what a rollback before any acknowledged commit restores
    initial = {"step": step, "model": copy.deepcopy(net.state_dict()), "opt": copy.deepcopy(opt.state_dict())}

    w = loader.welcome
    print(f"rank {rank}/{world}: feed {loader.path}: batch {w['batch_size']}, sample {w['sample']}, "
          f"{w['layout']}, resume at {w['resume']}", flush=True)
    model.train()
    t0, seen, trained, saved = time.time(), 0, False, step
    while step < args.steps:  # check before taking a batch: a taken batch is trained before any commit
        try:
            batch = ddp.next_batch(loader)  # under DDP every rank rolls back at the same call, to the same commit
        except longshore.RolledBack as rb:  # cluster mode: back to the last acknowledged commit
            step = saved = restore(args, rank, model, opt, rb, initial, device)
            print(f"rank {rank}: rolled back to epoch {rb.epoch} batch {rb.step}: restored the checkpoint "
                  f"at step {step}", flush=True)
            continue
        if batch is None:
            if loader.ended:
                break
            continue  # end of an epoch; the next call starts the next one
        loss = train_step(batch)
        step += 1
        seen += len(batch)
        trained = True
        print(f"rank {rank}: step {step} (epoch {batch.epoch} batch {batch.step}) loss {loss.item():.4f} "
              f"{seen / (time.time() - t0):.1f} img/s", flush=True)
        # cluster mode: an epoch completes only once every rank committed its last batch of it
        if step % args.commit_every == 0 or batch.end_of_stream:
            if checkpoint(args, rank, world, step, model, opt, loader):
                saved = step
    if args.headspace > 0 and trained and not loader.ended:
        # The trainer's ceiling: the same step on batches already in hand
        # (the stream's next 4, replayed), no wait for data. The batches
        # are the stream's own, trained on again as a warm-up would be.
        for batch in loader.headspace(steps=args.headspace, cache=4):
            train_step(batch)
            if device.type == "cuda":
                # timed by its kernels, not their launch (a training
                # step waits for them at its loss.item())
                torch.cuda.synchronize(device)
        saved = -1  # the cached batches were taken from the stream: commit after them
    if trained and saved != step:
        checkpoint(args, rank, world, step, model, opt, loader)
    st = loader.stall  # is data the bottleneck: the share of the steps spent waiting for a batch
    line = f"rank {rank}: waited for data {st.share:.1%} of {st.steps} steps ({st.wait:.2f} s of {st.wait + st.compute:.2f} s)"
    if st.headspace_steps:
        line += (f"; headspace {st.headspace_compute / st.headspace_steps * 1e3:.1f} ms a step against "
                 f"{(st.wait + st.compute) / st.steps * 1e3:.1f} ms in training: a perfect loader would make "
                 f"the steps {st.gain:.2f}x faster")
    print(line, flush=True)
    loader.close()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
