"""The Python client under torchrun with data-parallel training, end to
end: a longshore-coordinator (journal in a directory) and one
longshore-node serving two ranks over the feed (--ranks 2 --sink feed),
and `python -m torch.distributed.run --standalone --nproc_per_node 2`
running examples/pytorch_train.py (through ddp_trainer.py, which records
what each rank's loader handed out and got back, and swaps ResNet-18 for
a tiny CNN) with gloo on CPU and DistributedDataParallel. Each process
finds its rank's socket from LOCAL_RANK in $LONGSHORE_FEED_DIR.

Checked from the records: each process was served its own rank, the
ranks saw disjoint samples in each epoch, every sample is in exactly one
committed step of each epoch across both ranks, the ranks trained equal
numbers of steps per epoch (the coordinator pads), and every
state_dict() returned the same cut token on both ranks (the largest
generation of the ranks' tokens) with the rank's own commit in
"rank_token". Then the same through a kill -9 of the coordinator right
after a checkpoint, and a kill -9 inside a checkpoint's commit round (one
rank's commit durable, the other's not), which must end the job cleanly
instead of hanging it.

Needs /usr/bin/python3 with torch and torchvision (`make deps`); fails,
not skips, without them."""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time

import longshore
from test_cluster import read_record, replay
from limits import HANG_S

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "pytorch_train.py")
RANKS = 2
# torchrun's agent looks at its workers every --monitor_interval seconds
# (default 5: seconds of idle wall time at the end). Debian's torch 1.13
# on Python 3.11 cannot parse its own default "--redirects 0 --tee 0"
# (Std.from_str("0") is None: Python 3.11 no longer iterates an IntFlag's
# zero member, so every launch fails in to_map with "'NoneType' object has
# no attribute 'get'"); a mapping for a local rank that does not exist
# means the same (no redirection for ranks 0 and 1) and parses everywhere.
TORCHRUN_QUIRKS = ("--monitor_interval", "0.2", "--redirects", "9:1", "--tee", "9:1")


def require_torch():
    try:
        import torch.distributed as dist
        import torchvision  # noqa: F401
    except Exception as e:  # pragma: no cover - the environment, not the code
        raise AssertionError(f"test_ddp needs torch and torchvision in {sys.executable} "
                             f"(`make deps` installs python3-torch python3-torchvision): {e}") from None
    assert dist.is_available() and dist.is_gloo_available(), f"torch in {sys.executable} lacks torch.distributed/gloo"


class DDPRun:
    """`torch.distributed.run --standalone --nproc_per_node 2` of the
    recorded example against cluster c."""

    def __init__(self, c, tmp_path, commit_every, env=None):
        for r in range(RANKS):
            c.socket(r)  # the node listens on every rank's socket
        self.c = c
        self.rec = tmp_path / "rec"
        self.rec.mkdir()
        self.out_path = tmp_path / "torchrun.out"
        env = dict(os.environ, LONGSHORE_FEED_DIR=c.feed_dir, LONGSHORE_TEST_RECORD=str(self.rec),
                   OMP_NUM_THREADS="1", **(env or {}))
        for k in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k, None)
        with open(self.out_path, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(RANKS),
                 *TORCHRUN_QUIRKS,
                 os.path.join(HERE, "ddp_trainer.py"), "--ckpt", str(tmp_path / "ckpt"), "--num-classes", "3",
                 "--commit-every", str(commit_every), "--steps", "100000", "--threads", "1"],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def output(self):
        return self.out_path.read_text()

    def records(self):
        return [read_record(str(self.rec / f"rank{r}.jsonl")) for r in range(RANKS)]

    def checkpointed(self, epoch, step):
        """Whether both ranks' state_dict() returned for (epoch, step)."""
        return all(any(e["ev"] == "state" and (e["epoch"], e["step"]) == (epoch, step) for e in evs)
                   for evs in self.records())

    def wait_for(self, pred, what, timeout=HANG_S, poll=0.02):
        deadline = time.time() + timeout
        while not pred():
            assert self.proc.poll() is None, f"torchrun exited while waiting for {what}:\n{self.output()}{self.c.logs()}"
            if time.time() > deadline:
                self.kill()
                raise AssertionError(f"timed out waiting for {what}:\n{self.output()}{self.c.logs()}")
            time.sleep(poll)

    def workers(self):
        """Process ids of the trainer processes (torchrun's children in its session)."""
        out = subprocess.run(["ps", "-o", "pid=,args=", "-s", str(self.proc.pid)], capture_output=True, text=True).stdout
        return [int(line.split()[0]) for line in out.splitlines() if "ddp_trainer.py" in line and
                int(line.split()[0]) != self.proc.pid]

    def kill(self):
        if self.proc.poll() is None:
            for p in self.workers():  # their Python stacks into the output
                try:
                    os.kill(p, signal.SIGUSR1)
                except OSError:
                    pass
            time.sleep(1)
            os.killpg(self.proc.pid, signal.SIGKILL)  # torchrun and its workers: its own session
            self.proc.wait()

    def finish(self, timeout=HANG_S):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the DDP job did not finish:\n{self.output()}{self.c.logs()}") from None
        assert rc == 0, f"torchrun failed ({rc}):\n{self.output()}{self.c.logs()}"
        try:
            assert self.c.node.wait(HANG_S) == 0, f"node failed:\n{self.c.logs()}"
            assert self.c.coord.wait(HANG_S) == 0, f"coordinator failed:\n{self.c.logs()}"
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the cluster did not finish:\n{self.c.logs()}") from None


def check_ddp(recs, keys, epochs):
    """The data-parallel promise over both ranks' records. Returns
    (acks, rollbacks, steps per epoch)."""
    acks = rollbacks = 0
    for r, evs in enumerate(recs):
        hellos = [e for e in evs if e["ev"] == "hello"]
        assert hellos, f"rank {r} recorded no connection"
        for h in hellos:  # its own socket, and the node served it that rank
            assert h["local_rank"] == r and h["rank"] == r and h["mode"] == "cluster", h
            assert os.path.basename(h["path"]) == f"rank-{r}.sock", h
    hists = []
    for r, evs in enumerate(recs):
        try:
            h, a, rb = replay(evs)
        except AssertionError as e:
            raise AssertionError(f"rank {r}: {e}") from None
        hists.append(h)
        acks, rollbacks = acks + a, rollbacks + rb
    steps = []
    for e in range(epochs):
        per = [[ks for ep, _, ks in h if ep == e] for h in hists]
        # equal step counts: DDP all-reduces once per step on every rank
        assert len(per[0]) == len(per[1]) > 0, f"epoch {e}: committed steps per rank {[len(p) for p in per]}"
        steps.append(len(per[0]))
        # every sample in exactly one committed step of the epoch, across the ranks
        seen = collections.Counter(k for p in per for ks in p for k in ks)
        wrong = {k: seen[k] for k in set(keys) | set(seen) if seen[k] != 1}
        assert not wrong, f"epoch {e}: not exactly once across the ranks: {dict(list(wrong.items())[:10])}"
    # state_dict() is a collective: the ranks' calls pair up in order
    states = [[e for e in evs if e["ev"] == "state"] for evs in recs]
    assert len(states[0]) == len(states[1]) > 0, f"state_dict() calls per rank: {[len(s) for s in states]}"
    for s0, s1 in zip(*states):
        assert s0["token"] == s1["token"], f"cut tokens differ across ranks: {s0} {s1}"
        assert (s0["epoch"], s0["step"]) == (s1["epoch"], s1["step"]), (s0, s1)
        mine = [longshore.parse_token(s["rank_token"]) for s in (s0, s1)]
        assert len({t.job for t in mine}) == 1, mine
        assert s0["token"] == longshore.cut_token([s0["rank_token"], s1["rank_token"]]), (s0, s1)
        cut = longshore.parse_token(s0["token"])
        # (not the step: a journal token carries the coordinator's session
        # step, which after a rollback is not the trainer's continuous step)
        assert cut.gen == max(t.gen for t in mine) and cut.epoch == s0["epoch"], (cut, mine)
    for evs in recs:  # "rank_token" is the rank's own acknowledged commit
        last_ack = None
        for e in evs:
            if e["ev"] == "ack":
                last_ack = e
            elif e["ev"] == "state":
                assert last_ack and e["rank_token"] == last_ack["token"] and \
                    (e["epoch"], e["step"]) == (last_ack["epoch"], last_ack["step"]), (e, last_ack)
    return acks, rollbacks, steps


def test_ddp_torchrun_end_to_end(start_cluster, tiny_dataset, tmp_path):
    """Two epochs of 239 samples in batches of 7: 120 positions per rank
    (one of them padding: a repeat, trained on, never counted), 18 steps
    per rank and epoch, the last of one sample."""
    require_torch()
    root, keys = tiny_dataset
    os.unlink(os.path.join(root, keys[-1]))
    keys = keys[:-1]
    t0 = time.time()
    c = start_cluster(epochs=2, ranks=RANKS, batch=7)
    run = DDPRun(c, tmp_path, commit_every=4)
    run.finish()
    recs = run.records()
    # the ranks were fed disjoint samples in each epoch (no rollback: every batch delivered once)
    for e in range(2):
        got = [{k for ev in evs if ev["ev"] == "batch" and ev["epoch"] == e for k in ev["keys"]} for evs in recs]
        assert got[0] and got[1] and not got[0] & got[1], f"epoch {e}: ranks shared {sorted(got[0] & got[1])[:10]}"
    acks, rollbacks, steps = check_ddp(recs, keys, 2)
    assert rollbacks == 0
    pads = sum(ev["pads"] for evs in recs for ev in evs if ev["ev"] == "batch")
    assert steps == [18, 18] and pads == 2, (steps, pads)
    states = sum(ev["ev"] == "state" for ev in recs[0])
    print(f"DDP over torchrun: 2 ranks, 2 epochs of {len(keys)} samples, steps per rank per epoch {steps}, "
          f"{pads} pads, {acks} acks, {states} state_dicts per rank, {time.time() - t0:.1f} s")


def test_ddp_torchrun_coordinator_kill9(start_cluster, tiny_dataset, tmp_path):
    """kill -9 the coordinator mid-epoch, right after a checkpoint, and
    start it again with the same flags: both ranks get RolledBack naming
    that checkpoint's commit, the example restores it on both and trains
    to the end; the promise holds."""
    require_torch()
    _, keys = tiny_dataset
    t0 = time.time()
    c = start_cluster(epochs=2, ranks=RANKS)
    run = DDPRun(c, tmp_path, commit_every=4)
    run.wait_for(lambda: run.checkpointed(0, 7), "both ranks' checkpoint at step 8 (epoch 0 batch 7)",
                 poll=0.002)
    c.coord.send_signal(signal.SIGKILL)
    c.coord.wait()
    killed = time.time()
    c.start_coordinator()
    run.finish()
    recs = run.records()
    acks, rollbacks, steps = check_ddp(recs, keys, 2)
    out = run.output()
    # both restored the checkpoint of the commit the rollback named: the
    # trainer step of a checkpoint in epoch 0 is its batch + 1 (the ranks'
    # lines may interleave in torchrun's output)
    rolled = re.findall(r"rank (\d+): rolled back to epoch 0 batch (\d+): restored the checkpoint at step (\d+)", out)
    assert rollbacks >= RANKS and {int(r) for r, _, _ in rolled} == {0, 1}, out
    assert all(int(s) == int(b) + 1 for _, b, s in rolled), rolled
    for r, evs in enumerate(recs):
        rb = next(e for e in evs if e["ev"] == "rollback")
        assert rb["committed"] and rb["epoch"] == 0, (r, rb)
    print(f"DDP over torchrun, coordinator kill -9 at {killed - t0:.1f} s: {rollbacks} rollbacks, {acks} acks, "
          f"steps per epoch {steps}, job done in {time.time() - t0:.1f} s")


def test_ddp_torchrun_kill9_splits_a_commit_round(start_cluster, tiny_dataset, tmp_path):
    """kill -9 the coordinator inside a checkpoint's commit round: the
    journal holds rank 0's commit of step 12 (coord.acks), not rank 1's
    (the test trainer holds rank 1's commit until the coordinator is
    dead). Rank 0's rollback names step 12, rank 1's step 8: the job
    cannot go on in place (a running node takes no older token). What
    must hold: no hang -- Loader.state_dict() joins the all-gather even
    when its own commit is rolled back, so every rank raises RolledBack
    and the ranks' collectives stay in step -- and the example stops with
    its "restart the job from a checkpoint" error, having saved nothing of
    step 12; the step-8 checkpoint's cut token (what --resume takes) is
    the same in both ranks' loader files."""
    require_torch()
    c = start_cluster(epochs=2, ranks=RANKS)
    release = tmp_path / "release"
    run = DDPRun(c, tmp_path, commit_every=4, env={"LONGSHORE_TEST_HOLD_COMMIT": f"1:0:11:{release}"})
    acks_log = os.path.join(c.dir, "coord.acks")

    def acks_logged():
        with open(acks_log) as f:
            return sum(line.startswith("ack\t") for line in f)

    def held():
        return any(e["ev"] == "held" for e in run.records()[1])

    # 4 acks of steps 4 and 8, then rank 0's of step 12 while rank 1 holds its own
    run.wait_for(lambda: held() and acks_logged() >= 5, "rank 0's commit of step 12 in the coordinator's log")
    c.coord.send_signal(signal.SIGKILL)
    c.coord.wait()
    assert acks_logged() == 5, f"the commit round was not split: {acks_logged()} acks"
    c.start_coordinator()
    release.touch()
    try:
        rc = run.proc.wait(HANG_S)
    except subprocess.TimeoutExpired:
        run.kill()
        raise AssertionError(f"the DDP job hung after a split commit round:\n{run.output()}{c.logs()}") from None
    out = run.output()
    recs = run.records()
    rbs = [[(e["epoch"], e["step"]) for e in evs if e["ev"] == "rollback"] for evs in recs]
    assert rc != 0, f"torchrun succeeded after a split commit round:\n{out}{c.logs()}"
    assert "restart the job from a checkpoint" in out, out
    for r in range(RANKS):
        assert f"rank {r}: checkpoint at step 12 rolled back" in out, out
    assert sorted(r[0] for r in rbs if r) == [(0, 7), (0, 11)], rbs
    ck = tmp_path / "ckpt"
    files = sorted(os.listdir(ck))
    assert files == ["loader-rank0-step8.json", "loader-rank1-step8.json", "model.pt"], files
    cuts = {json.load(open(ck / f))["token"] for f in files if f.endswith(".json")}
    assert len(cuts) == 1, cuts
    print(f"DDP kill -9 in a commit round: rollbacks {rbs}; failed cleanly, resume token {cuts.pop()}")
