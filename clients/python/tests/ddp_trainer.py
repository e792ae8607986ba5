"""examples/pytorch_train.py under torchrun, recorded, for test_ddp.py.

    LONGSHORE_TEST_RECORD=DIR torchrun --standalone --nproc_per_node 2 ddp_trainer.py [pytorch_train.py args]

Runs the example's own main() -- process group (gloo on CPU),
DistributedDataParallel, checkpoints through Loader.state_dict(), restore
on longshore.RolledBack -- with two substitutions, both test harness:

- longshore.Loader is a subclass that appends what the rank's loader
  hands out and gets back to DIR/rank<LOCAL_RANK>.jsonl (JSON lines):

    {"ev": "hello", "path", "local_rank", "rank", "mode"}   first batch's connection
    {"ev": "batch", "epoch", "step", "era", "keys": [real samples], "pads", "eos"}
    {"ev": "ack", "epoch", "step", "token"}         a commit acknowledged
    {"ev": "commit_rolled_back"}                    a commit's era ended
    {"ev": "state", "epoch", "step", "token", "rank_token"}   a state_dict() returned
    {"ev": "rollback", "epoch", "step", "token", "committed"}
    {"ev": "end"}                                   the job ended for the rank

- LONGSHORE_TEST_HOLD_COMMIT="RANK:EPOCH:STEP:FILE" holds that rank's
  commit of (EPOCH, STEP) until FILE exists, so a test can kill the
  coordinator between the ranks' commits of one checkpoint every time;

- the model is a tiny CNN instead of ResNet-18 (same interface:
  resnet18(num_classes=...)), so two ranks on two shared CPU cores train
  the job in seconds; DDP all-reduces its gradients all the same.
"""

import faulthandler
import json
import os
import signal
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, os.path.join(REPO, "examples"))

import longshore  # noqa: E402
import torch  # noqa: E402

import pytorch_train  # noqa: E402


class TinyNet(torch.nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, num_classes)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def tiny(num_classes=1000):
    return TinyNet(num_classes)


def tok(t):
    return t.decode() if isinstance(t, (bytes, bytearray)) else t


class RecordingLoader(longshore.Loader):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self._rec = open(os.path.join(os.environ["LONGSHORE_TEST_RECORD"], f"rank{self.local_rank}.jsonl"), "a",
                         buffering=1)
        self._hello = None
        self._end_logged = False

    def _log(self, **ev):
        self._rec.write(json.dumps(ev) + "\n")

    def next_batch(self):
        try:
            b = super().next_batch()
        except longshore.RolledBack as rb:
            self._log(ev="rollback", epoch=rb.epoch, step=rb.step, token=tok(rb.token), committed=rb.committed)
            raise
        if self._conn is not None and self._hello is not self._conn:
            self._hello = self._conn
            w = self._conn.welcome
            self._log(ev="hello", path=self.path, local_rank=self.local_rank, rank=w.get("rank"), mode=w.get("mode"))
        if b is not None:
            keys = [k for k, pad in zip(b.keys, b.pads) if not pad]
            self._log(ev="batch", epoch=b.epoch, step=b.step, era=b.era, keys=keys, pads=sum(map(bool, b.pads)),
                      eos=b.end_of_stream)
        elif self.ended and not self._end_logged:
            self._end_logged = True
            self._log(ev="end")
        return b

    def commit(self, *a, **kw):
        self._hold()
        try:
            t = super().commit(*a, **kw)
        except longshore.RolledBack:
            self._log(ev="commit_rolled_back")
            raise
        e, s, _ = self._committed
        self._log(ev="ack", epoch=e, step=s, token=tok(t))
        return t

    def _hold(self):
        hold = os.environ.get("LONGSHORE_TEST_HOLD_COMMIT")
        if not hold or self._last is None:
            return
        rank, epoch, step, path = hold.split(":", 3)
        if (self.local_rank, self._last[0], self._last[1]) != (int(rank), int(epoch), int(step)):
            return
        self._log(ev="held", epoch=self._last[0], step=self._last[1])
        while not os.path.exists(path):
            time.sleep(0.005)

    def state_dict(self):
        sd = super().state_dict()
        self._log(ev="state", epoch=sd.get("epoch"), step=sd.get("step"), token=tok(sd.get("token")),
                  rank_token=tok(sd.get("rank_token")))
        return sd


def main():
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # test_ddp.py asks for stacks before it kills a hung run
    longshore.Loader = RecordingLoader  # pytorch_train calls longshore.Loader(...)
    pytorch_train.torchvision = types.SimpleNamespace(models=types.SimpleNamespace(resnet18=tiny))
    # The example ends with dist.destroy_process_group() after its last
    # collective: exit right there, before the interpreter frees main()'s
    # DDP model and tensors. With torch 1.13 and gloo a worker hung in
    # that teardown in about 1 of 10 runs here (its stack: only the call
    # of main() below, main's own frame gone), and torchrun waits for it
    # forever.
    destroy = pytorch_train.dist.destroy_process_group

    def destroy_and_exit(*a, **kw):
        destroy(*a, **kw)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    pytorch_train.dist.destroy_process_group = destroy_and_exit
    pytorch_train.main(sys.argv[1:])


if __name__ == "__main__":
    main()
