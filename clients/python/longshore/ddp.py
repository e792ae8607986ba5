"""Data-parallel rollbacks in a few lines (cluster mode).

When the coordinator restarts, every rank of the job rolls back to its
last acknowledged commit -- but each rank learns it when its own feed
says so, and a rank may first read a batch or two of the ended era that
were already on their way. Under DDP the ranks must roll back at the
same step (a rank that trains one more stale batch pairs its gradient
all-reduce with another rank's next collective and hangs the job) and
to the same commit (a running cluster cannot take a rank back to an
older one). `next_batch` does both:

    import longshore
    from longshore import ddp

    while step < steps:
        try:
            batch = ddp.next_batch(loader)    # every rank calls it once per turn of the loop
        except longshore.RolledBack as rb:    # raised on every rank at the same call, naming the same commit
            step = restore(rb)                # the checkpoint saved with rb.token (rb.committed False: the initial model)
            continue
        if batch is None:                     # an epoch's end (the same call on every rank) or the job's
            if loader.ended:
                break
            continue
        ...train, checkpoint with loader.state_dict()...

Each call reads the rank's next batch, then makes one small all-reduce
(whether any rank rolled back). When one did, the others drop the stale
batches still on their way until their own rollback arrives (they will be
delivered again), and the ranks all-reduce what they rolled back to: if
it is not the same commit everywhere (the coordinator died between the
ranks' commits of one checkpoint), every rank raises `Diverged` -- the
job must be restarted with `longshore-coordinator --resume` and the cut
token of a checkpoint every rank saved. Without torch.distributed (or
with one rank) and on a standalone node (no rollbacks) it is
`loader.next_batch()` and makes no collective.
"""

from typing import Any, Optional

from ._feed import Batch, FeedError, Loader, RolledBack

__all__ = ["next_batch", "Diverged"]


class Diverged(FeedError):
    """The ranks rolled back to different commits (or one rank's job
    ended while another rolled back): the job cannot go on in place.
    Restart it from a checkpoint every rank saved, with
    `longshore-coordinator --resume TOKEN` (the checkpoint's cut token,
    Loader.state_dict()["token"]). Raised on every rank together."""

    def __init__(self, message: str) -> None:
        super().__init__("rollback_diverged", message, fatal=True)


def _group_dist(process_group):
    """torch.distributed when initialized with more than one rank in the
    group, else None."""
    try:
        import torch.distributed as dist
    except Exception:  # torch is optional
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    if dist.get_world_size(process_group) <= 1:
        return None
    return dist


def _tensor(dist, process_group, values):
    import torch

    device = torch.device("cpu")
    if dist.get_backend(process_group) == "nccl":
        device = torch.device("cuda", torch.cuda.current_device())
    return torch.tensor(values, dtype=torch.int64, device=device)


def _any_rank(dist, process_group, flag: bool) -> bool:
    t = _tensor(dist, process_group, [1 if flag else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=process_group)
    return bool(t.item())


def _await_rollback(loader: Loader, batch: Optional[Batch]) -> Optional[RolledBack]:
    """Another rank rolled back, so this one will (a coordinator restart
    rolls back every rank) once it has read the ended era's batches still
    on their way: drop them and return the rollback; None if this rank's
    job ended first."""
    while True:
        if batch is not None:
            batch.release()
        try:
            batch = loader.next_batch()
        except RolledBack as rb:
            return rb
        if batch is None and loader.ended:
            return None


def _agree(dist, process_group, rb: Optional[RolledBack]) -> None:
    """Raise Diverged on every rank unless every rank rolled back to the
    same commit."""
    if rb is None:  # this rank's job ended: no commit to agree on
        mine = [-1, -1, -1]
    elif rb.committed:
        mine = [1, rb.epoch, rb.step]
    else:
        mine = [0, -1, -1]
    t = _tensor(dist, process_group, mine + [-v for v in mine])
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=process_group)
    lo, hi = t[:3].tolist(), [-v for v in t[3:].tolist()]
    if lo == hi:
        return

    def name(v):
        return {-1: "a rank whose job had ended", 0: "no commit (the initial model)"}.get(v[0]) or \
            f"epoch {v[1]} step {v[2]}"

    raise Diverged(f"the ranks rolled back to different points, from {name(lo)} to {name(hi)} (this rank: "
                   f"{name(mine)}): a running cluster cannot take a rank back to an older commit; restart the job "
                   f"from a checkpoint every rank saved (longshore-coordinator --resume with its cut token)")


def next_batch(loader: Loader, process_group: Any = None) -> Optional[Batch]:
    """The rank's next batch (None at an epoch's or the job's end, as
    Loader.next_batch), the ranks agreeing on rollbacks: RolledBack is
    raised on every rank of `process_group` (default: the whole world) at
    the same call, naming the same commit, or Diverged on every rank when
    they cannot agree. Every rank must call it the same number of times
    (once per turn of the training loop)."""
    rb = None
    try:
        b = loader.next_batch()
    except RolledBack as e:
        b, rb = None, e
    dist = _group_dist(process_group)
    if dist is None or loader.welcome.get("mode") != "cluster":  # no peers, or no rollbacks
        if rb is not None:
            raise rb
        return b
    if not _any_rank(dist, process_group, rb is not None):
        return b
    if rb is None:  # another rank rolled back: so will this one
        rb = _await_rollback(loader, b)
    _agree(dist, process_group, rb)
    raise rb
