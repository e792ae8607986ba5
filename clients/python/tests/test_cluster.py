"""The Python client against a real cluster: longshore-coordinator and a
longshore-node serving its rank over the feed (--join ... --sink feed),
as processes on loopback, and a trainer process (cluster_trainer.py)
using longshore.Loader. The promise is checked from what the trainer
recorded: every sample in exactly one committed step per epoch."""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import longshore
from limits import HANG_S

HERE = os.path.dirname(os.path.abspath(__file__))


def start_trainer(c, record, **kw):
    argv = [sys.executable, os.path.join(HERE, "cluster_trainer.py"), "--socket", c.socket(), "--record", record]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        argv += [flag] if v is True else [flag, str(v)]
    return subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)


def read_record(path):
    if not os.path.exists(path):
        return []
    # One read, whole lines only: iterating the file while the trainer
    # appends can yield a line's tail as a line of its own (the head was
    # read at the end of the file, without its newline, and skipped).
    with open(path) as f:
        return [json.loads(line) for line in f.read().split("\n")[:-1]]


def wait_record(path, pred, proc, c, timeout=HANG_S):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred(read_record(path)):
            return
        assert proc.poll() is None, f"trainer exited early:\n{proc.stderr.read()}\n{c.logs()}"
        time.sleep(0.02)
    raise AssertionError(f"trainer record never satisfied the wait\n{c.logs()}")


def replay(events):
    """Replays one trainer's record: rollbacks name the last ack, steps
    continue without gaps in the model's history, nothing is left
    uncommitted at the end. Returns (committed history [(epoch, step,
    keys)], acks, rollbacks)."""
    hist, committed, last_ack = [], 0, None
    acks = rollbacks = 0
    for ev in events:
        if ev["ev"] == "batch":
            hist.append((ev["epoch"], ev["step"], ev["keys"]))
        elif ev["ev"] == "ack":
            longshore.parse_token(ev["token"])
            committed, last_ack = len(hist), (ev["epoch"], ev["step"], ev["token"])
            acks += 1
        elif ev["ev"] == "rollback":
            rollbacks += 1
            if last_ack is None:
                assert not ev["committed"], ev
            else:
                assert ev["committed"] and (ev["epoch"], ev["step"], ev["token"]) == last_ack, (ev, last_ack)
            del hist[committed:]
    assert events and events[-1]["ev"] == "end", "the trainer did not reach the end of the job"
    assert committed == len(hist), f"{len(hist) - committed} batches trained after the last commit"
    nxt = collections.Counter()
    for e, s, _ in hist:
        assert s == nxt[e], f"epoch {e}: step {s} follows step {nxt[e] - 1} in the model's history"
        nxt[e] = s + 1
    return hist, acks, rollbacks


def check_promise(events, keys, epochs):
    """replay(events), then: every key is in exactly one committed step of
    each epoch. Returns (acks, rollbacks)."""
    hist, acks, rollbacks = replay(events)
    for e in range(epochs):
        seen = collections.Counter(k for ep, _, ks in hist if ep == e for k in ks)
        wrong = {k: seen[k] for k in set(keys) | set(seen) if seen[k] != 1}
        assert not wrong, f"epoch {e}: samples not exactly once in committed history: {dict(list(wrong.items())[:10])}"
    return acks, rollbacks


def finish(c, trainer, timeout=HANG_S):
    try:
        assert trainer.wait(timeout) == 0, f"trainer failed:\n{trainer.stderr.read()}\n{c.logs()}"
        assert c.node.wait(HANG_S) == 0, f"node failed:\n{c.logs()}"
        assert c.coord.wait(HANG_S) == 0, f"coordinator failed:\n{c.logs()}"
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not finish:\n{c.logs()}") from None


def test_cluster_feed_end_to_end(start_cluster, tiny_dataset, tmp_path):
    _, keys = tiny_dataset
    c = start_cluster(epochs=2)
    record = str(tmp_path / "trainer.jsonl")
    t0 = time.time()
    tr = start_trainer(c, record, commit_every=4, step_time=0)
    finish(c, tr)
    acks, rollbacks = check_promise(read_record(record), keys, 2)
    assert rollbacks == 0 and acks >= 2 * 30 // 4
    print(f"cluster feed: 2 epochs of {len(keys)} samples, {acks} acks, {time.time() - t0:.1f} s")


def test_cluster_coordinator_kill9_rollback(start_cluster, tiny_dataset, tmp_path):
    """kill -9 the coordinator mid-epoch and start it again with the same
    flags: the trainer sees RolledBack naming its last acknowledged commit
    (epoch, step, token), restores it and reads on to the end, exactly
    once in committed history."""
    _, keys = tiny_dataset
    c = start_cluster(epochs=2)
    record = str(tmp_path / "trainer.jsonl")
    t0 = time.time()
    tr = start_trainer(c, record, commit_every=3, step_time=0.05)
    # mid-epoch 0: three acks in
    wait_record(record, lambda evs: sum(e["ev"] == "ack" for e in evs) >= 3, tr, c)
    c.coord.send_signal(signal.SIGKILL)
    c.coord.wait()
    killed = time.time()
    c.start_coordinator()
    wait_record(record, lambda evs: any(e["ev"] == "rollback" for e in evs), tr, c)
    rolled = time.time()
    finish(c, tr)
    events = read_record(record)
    acks, rollbacks = check_promise(events, keys, 2)
    assert rollbacks >= 1
    rb = next(e for e in events if e["ev"] == "rollback")
    assert rb["committed"] and rb["epoch"] == 0
    print(f"coordinator kill -9 at {killed - t0:.1f} s; trainer rolled back to epoch {rb['epoch']} step {rb['step']} "
          f"{rolled - killed:.1f} s later; {acks} acks, {rollbacks} rollback(s); job done in {time.time() - t0:.1f} s")


def test_pytorch_example_rollback(start_cluster, tmp_path):
    """examples/pytorch_train.py through a coordinator kill -9: it restores
    the checkpoint the rollback names and trains on to the end of the job."""
    c = start_cluster(epochs=1)
    sock = c.socket()
    out_path = tmp_path / "train.out"
    env = dict(os.environ, LONGSHORE_FEED_DIR=os.path.dirname(sock), LOCAL_RANK="0")
    with open(out_path, "w") as out:
        tr = subprocess.Popen([sys.executable, os.path.join(HERE, "..", "..", "..", "examples", "pytorch_train.py"),
                               "--ckpt", str(tmp_path / "ckpt"), "--num-classes", "3", "--commit-every", "3",
                               "--steps", "1000", "--threads", "1"], stdout=out, stderr=subprocess.STDOUT, env=env)

    def output():
        return out_path.read_text()

    deadline = time.time() + HANG_S
    while "checkpoint at step 6\n" not in output():
        assert tr.poll() is None and time.time() < deadline, output() + c.logs()
        time.sleep(0.02)
    c.coord.send_signal(signal.SIGKILL)
    c.coord.wait()
    c.start_coordinator()
    try:
        assert tr.wait(HANG_S) == 0, output() + c.logs()
    except subprocess.TimeoutExpired:
        tr.kill()
        raise AssertionError("pytorch_train.py did not finish:\n" + output() + c.logs()) from None
    out = output()
    rolled = [line for line in out.splitlines() if "rolled back to epoch" in line]
    assert rolled, out
    # it restored the checkpoint of the commit the rollback named: the
    # trainer step of a checkpoint is one more than its batch (one epoch)
    for line in rolled:
        batch = int(line.split("batch ")[1].split(":")[0])
        assert line.endswith(f"restored the checkpoint at step {batch + 1}"), line
    # and trained every batch of the epoch after it, ending with a checkpoint of the last
    checkpoints = [line for line in out.splitlines() if ": checkpoint at step " in line]
    assert "step 30 (epoch 0 batch 29)" in out and checkpoints[-1].endswith("checkpoint at step 30"), out
