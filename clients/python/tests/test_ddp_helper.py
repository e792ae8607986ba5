"""longshore.ddp.next_batch with two real torch.distributed (gloo, CPU)
processes, each reading its own scripted cluster-mode node (fakenode.py):
the ranks roll back at the same call and to the same commit, or all stop
with ddp.Diverged."""

import base64
import multiprocessing
import os
import traceback

import pytest

from fakenode import BATCH, HELLO, ROLLBACK, WELCOME, FakeNode, batch, welcome
from limits import HANG_S

T3 = b"lsr1.iHdmVUQzIhEHAAr0yoIk"  # any well-formed tokens (see test_token.py)
T7 = b"lsr1.iHdmVUQzIhGsAgKCAsRuyxE"


def rollback(step, token, era=2):
    return {"epoch": 0, "step": step, "token": base64.b64encode(token).decode(), "committed": True, "era": era}


# Rank 0's rollback comes right after its first batch; rank 1 reads one
# more batch of the ended era (on its way before the rollback) first.
SCRIPTS = {
    "agree": [
        [("send", BATCH, batch(1, 0, 0, era=1)), ("send", ROLLBACK, rollback(0, T3)),
         ("send", BATCH, batch(2, 0, 1, era=2))],
        [("send", BATCH, batch(1, 0, 0, era=1)), ("send", BATCH, batch(2, 0, 1, era=1)),
         ("send", ROLLBACK, rollback(0, T7)), ("send", BATCH, batch(3, 0, 1, era=2))],
    ],
    # the coordinator died between the ranks' commits of step 1
    "diverge": [
        [("send", BATCH, batch(1, 0, 0, era=1)), ("send", BATCH, batch(2, 0, 1, era=1)),
         ("send", ROLLBACK, rollback(1, T3))],
        [("send", BATCH, batch(1, 0, 0, era=1)), ("send", BATCH, batch(2, 0, 1, era=1)),
         ("send", ROLLBACK, rollback(0, T7))],
    ],
}


def worker(rank, store, case, out):
    try:
        import torch.distributed as dist

        import longshore
        from longshore import ddp

        node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome(era=1))] + SCRIPTS[case][rank])
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
        loader = longshore.Loader(node.path, timeout=HANG_S)
        calls = []
        for _ in range(3):
            try:
                b = ddp.next_batch(loader)
                calls.append(("batch", b.step, b.era))
                b.release()
            except ddp.Diverged as e:
                calls.append(("diverged", "restart the job from a checkpoint" in str(e)))
                break
            except longshore.RolledBack as rb:
                calls.append(("rollback", rb.epoch, rb.step))
        loader.close()
        dist.destroy_process_group()
        out.put((rank, calls))
    except BaseException:
        out.put((rank, traceback.format_exc()))


def run_pair(case, tmp_path):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    store = os.path.join(str(tmp_path), "store")
    procs = [ctx.Process(target=worker, args=(r, store, case, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = dict(out.get(timeout=HANG_S) for _ in procs)
    finally:
        for p in procs:
            p.join(HANG_S)
            if p.is_alive():
                p.kill()
    for r in range(2):
        assert isinstance(got[r], list), f"rank {r}:\n{got[r]}"
    return got


def test_ranks_roll_back_together(tmp_path):
    got = run_pair("agree", tmp_path)
    # rank 1's stale batch (step 1 of era 1) is dropped, never handed out
    for r in range(2):
        assert got[r] == [("batch", 0, 1), ("rollback", 0, 0), ("batch", 1, 2)], got


def test_ranks_that_cannot_agree_stop_together(tmp_path):
    got = run_pair("diverge", tmp_path)
    for r in range(2):
        assert got[r] == [("batch", 0, 1), ("batch", 1, 1), ("diverged", True)], got


def test_without_distributed_it_is_next_batch():
    import longshore
    from longshore import ddp

    node = FakeNode([("expect", HELLO), ("send", WELCOME, welcome(era=1))] + SCRIPTS["agree"][0])
    loader = longshore.Loader(node.path, timeout=HANG_S)
    assert ddp.next_batch(loader).step == 0
    with pytest.raises(longshore.RolledBack) as ei:
        ddp.next_batch(loader)
    assert (ei.value.step, ei.value.token) == (0, T3)
    assert ddp.next_batch(loader).era == 2
    loader.close()
    node.join()
