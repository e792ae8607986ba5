"""Data-stall accounting from the trainer's side: the loader times how
long the trainer waited for each batch and how long it computed between
batches, on an injected clock, and reports them to the node on its
releases (docs/feed-protocol.md, the release's "stall" field)."""

import json
import threading

import longshore
from fakenode import BATCH, END, EPOCH_END, HELLO, RELEASE, WELCOME, FakeNode, batch, welcome
from limits import HANG_S


class TrainerClock:
    """The trainer's clock: moves only when advanced. It counts its
    readings so that a fake node can hold a batch back until the trainer
    has asked for it (the loader reads the clock once when asked for a
    batch and once when it has it)."""

    def __init__(self):
        self.now = 100.0
        self.reads = 0
        self.cond = threading.Condition()

    def __call__(self):
        with self.cond:
            self.reads += 1
            self.cond.notify_all()
            return self.now

    def advance(self, s):
        with self.cond:
            self.now += s

    def wait_reads(self, n):
        with self.cond:
            assert self.cond.wait_for(lambda: self.reads >= n, HANG_S), f"the trainer read its clock {self.reads} times, want {n}"


def stall_reports(received):
    waits, computes = [], []
    for t, p in received:
        if t == RELEASE and "stall" in p:
            waits += p["stall"]["wait_us"]
            computes += p["stall"]["compute_us"]
    return waits, computes


def test_slow_node_shows_high_stall_share():
    """A node that hands out each batch 90 ms (of the trainer's clock)
    after the trainer asked for it, to a trainer computing 10 ms a step:
    every step reports 90 ms waiting and 10 ms computing, a stall share of
    0.9, in reports batched every 4 steps (not a message a step)."""
    clk = TrainerClock()
    n = 10

    def delayed(k):
        def step(node):
            clk.wait_reads(2 * k + 1)  # the trainer asked for batch k
            clk.advance(0.090)

        return step

    script = [("expect", HELLO), ("send", WELCOME, welcome(era=1))]
    for k in range(n):
        script += [delayed(k), ("send", BATCH, batch(k + 1, 0, k, era=1))]
    script += [("send", EPOCH_END, {"epoch": 0}), ("send", END, {})]
    node = FakeNode(script)
    loader = longshore.Loader(node.path, timeout=HANG_S, clock=clk, stall_every=4)
    got = 0
    for b in loader:
        got += 1
        clk.advance(0.010)  # the trainer's step
        b.release()
    assert got == n
    st = loader.stall
    assert st.steps == n and abs(st.wait - 0.9) < 1e-9 and abs(st.compute - 0.1) < 1e-9
    assert abs(st.share - 0.9) < 1e-9
    loader.close()
    node.join()
    waits, computes = stall_reports(node.received)
    assert waits == [90000] * n and computes == [10000] * n
    carrying = [p for t, p in node.received if t == RELEASE and "stall" in p]
    # every 4 steps on a batch's release, the last 2 on the goodbye's
    assert [len(p["stall"]["wait_us"]) for p in carrying] == [4, 4, 2]
    assert carrying[-1]["ids"] == []


def test_node_summary_shows_trainer_split(start_node, tiny_dataset, tmp_path):
    """A trainer computing 10 ms a step (on its clock) against the real
    node (`longshore-node --standalone --sink feed`): the node's
    --stats-json has the steps, their waits and computes in
    `trainer_wait`, per rank and in all."""
    clk = TrainerClock()
    root, _ = tiny_dataset
    feed = str(tmp_path / "feed")
    stats = str(tmp_path / "stats.json")
    node = start_node(["--dataset", root, "--epochs", 2, "--batch-size", 16, "--size", 16, "--transform", "resize",
                       "--decoders", 1, "--progress", "never", "--stats-json", stats], feed, stdout="capture")
    sock = node.socket()
    loader = longshore.Loader(sock, timeout=HANG_S, clock=clk)
    for b in loader.headspace(steps=8, cache=2):  # the compute ceiling: 5 ms a step
        clk.advance(0.005)
    n = 2  # the headspace's cached batches
    for b in loader.batches():
        n += 1
        clk.advance(0.010)
        b.release()
    loader.close()
    assert node.wait() == 0, node.stderr
    out = node.stdout
    assert n == 30  # 240 samples, 16 a batch, 2 epochs
    with open(stats) as f:
        tw = json.load(f)["trainer_wait"]
    steps = n - 2
    assert tw["steps"] == steps and tw["wait_seconds"] == 0 and abs(tw["compute_seconds"] - 0.01 * steps) < 1e-6
    assert tw["stall_share"] == 0
    # 10 ms a step measured against 5 ms replayed: a perfect loader, 2x
    assert tw["headspace_steps"] == 8 and abs(tw["headspace_compute_seconds"] - 0.04) < 1e-6 and abs(tw["gain"] - 2) < 1e-6
    [r0] = tw["ranks"]
    assert r0["rank"] == 0 and r0["steps"] == steps and abs(r0["compute_seconds"] - 0.01 * steps) < 1e-6
    assert "trainer wait" in out and "2.00x faster" in out, out


def test_headspace_states_the_gain():
    """Headspace: two cached batches replayed for 8 steps at 5 ms each
    (the trainer's compute ceiling), then the rest of the stream at 8 ms
    a step (a trainer slowed by the loader beside it): a perfect loader
    would make it 1.6 times faster. The node gets the headspace run in a
    report, and the epoch's end still reaches the trainer's loop."""
    clk = TrainerClock()
    script = [("expect", HELLO), ("send", WELCOME, welcome(era=1))]
    script += [("send", BATCH, batch(k + 1, 0, k, era=1)) for k in range(6)]
    script += [("send", EPOCH_END, {"epoch": 0}), ("send", END, {})]
    node = FakeNode(script)
    loader = longshore.Loader(node.path, timeout=HANG_S, clock=clk)
    seen = []
    for b in loader.headspace(steps=8, cache=2):
        seen.append(b.step)
        clk.advance(0.005)
    assert seen == [0, 1] * 4
    rest = []
    for b in loader:
        rest.append(b.step)
        clk.advance(0.008)
        b.release()
    assert rest == [2, 3, 4, 5]  # the cached batches are not delivered again; the epoch ended
    st = loader.stall
    assert st.headspace_steps == 8 and abs(st.headspace_compute - 0.04) < 1e-9
    assert st.steps == 4 and st.wait == 0 and abs(st.gain - 1.6) < 1e-9
    assert loader.next_batch() is None and loader.ended
    loader.close()
    node.join()
    hs = [p["stall"]["headspace"] for t, p in node.received if t == RELEASE and "headspace" in p.get("stall", {})]
    assert hs == [{"steps": 8, "compute_us": 40000}]
    waits, computes = stall_reports(node.received)
    assert waits == [0] * 4 and computes == [8000] * 4


def test_pytorch_example_headspace(start_node, tiny_dataset, tmp_path):
    """examples/pytorch_train.py --headspace: after its steps it replays
    cached batches for the trainer's compute ceiling and prints the share
    of its steps spent waiting for data and the gain a perfect loader
    would give; the checkpoint it writes after commits past the cached
    batches, which the node's next epoch follows."""
    import os
    import re
    import subprocess
    import sys

    root, _ = tiny_dataset
    node = start_node(["--dataset", root, "--epochs", 3, "--batch-size", 16, "--size", 16, "--transform", "resize",
                       "--decoders", 1, "--progress", "never"], str(tmp_path / "feed"))
    sock = node.socket()
    example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples", "pytorch_train.py")
    r = subprocess.run([sys.executable, example, "--socket", sock, "--ckpt", str(tmp_path / "ckpt"), "--num-classes", "3",
                        "--steps", "6", "--commit-every", "100", "--headspace", "8", "--threads", "1"],
                       capture_output=True, text=True, timeout=HANG_S)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    m = re.search(r"rank 0: waited for data [0-9.]+% of 6 steps .*; headspace ([0-9.]+) ms a step against "
                  r"([0-9.]+) ms in training: a perfect loader would make the steps ([0-9.]+)x faster", out)
    assert m, out
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0 and float(m.group(3)) > 0, out
    # its last checkpoint follows the 4 cached batches: steps 0-5, then 6-9
    ck = [line for line in out.splitlines() if ": checkpoint at step " in line]
    assert ck and ck[-1].endswith("checkpoint at step 6"), out
    with open(os.path.join(tmp_path, "ckpt", "loader-rank0-step6.json")) as f:
        sd = json.load(f)
    assert (sd["epoch"], sd["step"]) == (0, 9), sd  # 240 samples at 16: batches 0-14 an epoch
