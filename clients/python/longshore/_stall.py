"""Data-stall accounting from the trainer's side (docs/feed-protocol.md,
the release's "stall" field): per step, how long the trainer waited for
its batch and how long it spent before asking for the next one."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional

# Steps accounted before a report rides on a release: a few hundred bytes
# every so many steps, never a message of its own.
DEFAULT_EVERY = 16
# The most steps one report carries (the node refuses more).
MAX_STEPS = 1024


class Stall:
    """What a loader accounted so far: over `steps` batches, `wait`
    seconds waiting for them (from asking for a batch to having it) and
    `compute` seconds between having one and asking for the next.
    `share` is wait / (wait + compute): the fraction of the trainer's time
    spent waiting for data (0 with nothing accounted)."""

    __slots__ = ("steps", "wait", "compute", "headspace_steps", "headspace_compute")

    def __init__(self, steps: int = 0, wait: float = 0.0, compute: float = 0.0) -> None:
        self.steps, self.wait, self.compute = steps, wait, compute
        # Loader.headspace(): steps on replayed cached batches and their time
        self.headspace_steps, self.headspace_compute = 0, 0.0

    @property
    def share(self) -> float:
        t = self.wait + self.compute
        return self.wait / t if t > 0 else 0.0

    @property
    def gain(self) -> float:
        """How many times faster the steps would be with a perfect loader:
        the mean step (wait and compute) over the mean headspace step (0
        without a headspace run)."""
        if not self.steps or not self.headspace_steps or self.headspace_compute <= 0:
            return 0.0
        return ((self.wait + self.compute) / self.steps) / (self.headspace_compute / self.headspace_steps)

    def __repr__(self) -> str:
        hs = ""
        if self.headspace_steps:
            hs = f", headspace {self.headspace_compute / self.headspace_steps * 1e3:.2f} ms/step, gain {self.gain:.2f}x"
        return (f"Stall(steps={self.steps}, wait={self.wait:.3f}s, compute={self.compute:.3f}s, "
                f"share={self.share:.1%}{hs})")


class StallMeter:
    """The accounting, read from `clock` (seconds, monotonic; default
    time.monotonic; tests inject their own). `ask()` when the trainer asks
    for a batch, `handed(asked)` when it has one: a step is complete when
    the trainer asks for the batch after it."""

    def __init__(self, clock: Optional[Callable[[], float]] = None, every: int = DEFAULT_EVERY) -> None:
        self.clock = clock or time.monotonic
        self.every = max(1, min(int(every), MAX_STEPS))
        self._in_hand = False
        self._got_at = 0.0
        self._wait = 0.0
        self._wait_us: List[int] = []
        self._compute_us: List[int] = []
        self._headspace = None  # [steps, microseconds] not yet reported
        self.total = Stall()

    def ask(self) -> float:
        now = self.clock()
        if self._in_hand:
            self._in_hand = False
            compute = max(0.0, now - self._got_at)
            self._wait_us.append(round(self._wait * 1e6))
            self._compute_us.append(round(compute * 1e6))
            t = self.total
            t.steps += 1
            t.wait += self._wait
            t.compute += compute
        return now

    def handed(self, asked: float) -> None:
        now = self.clock()
        self._in_hand, self._got_at, self._wait = True, now, max(0.0, now - asked)

    def drop(self) -> None:
        """Forget the batch in hand: what follows is not its step."""
        self._in_hand = False

    def headspace(self, steps: int, compute: float) -> None:
        """Add a headspace run: steps on replayed batches that took compute seconds."""
        t = self.total
        t.headspace_steps += steps
        t.headspace_compute += compute
        if self._headspace is None:
            self._headspace = [0, 0]
        self._headspace[0] += steps
        self._headspace[1] += round(compute * 1e6)

    def due(self) -> bool:
        return len(self._wait_us) >= self.every or self._headspace is not None

    def take(self) -> Optional[Dict[str, Any]]:
        """The steps not yet reported (at most MAX_STEPS), as the release's
        "stall" field; None if there are none."""
        if not self._wait_us and self._headspace is None:
            return None
        w, c = self._wait_us[:MAX_STEPS], self._compute_us[:MAX_STEPS]
        del self._wait_us[:MAX_STEPS], self._compute_us[:MAX_STEPS]
        r: Dict[str, Any] = {"wait_us": w, "compute_us": c}
        if self._headspace is not None:
            r["headspace"] = {"steps": self._headspace[0], "compute_us": self._headspace[1]}
            self._headspace = None
        return r


def _replayable(b):
    """A copy of batch b in private memory, whose release does nothing."""
    import numpy as np

    from ._feed import Batch

    desc = {"id": b.id, "epoch": b.epoch, "step": b.step, "labels": b.labels.tolist(), "keys": list(b.keys),
            "indices": list(b.indices), "positions": list(b.positions), "pads": list(b.pads), "failed": b.failed,
            "layout": b.layout, "short": list(b.short), "era": b.era}
    return Batch(desc, np.array(b.images, copy=True), lambda: None)


def headspace(loader, steps: int, cache: int):
    """Loader.headspace(): take `cache` batches from the loader (copied,
    their slots released), then yield them over and over for `steps`
    steps, timing the trainer's compute on each; the run goes to the
    loader's tally and its next report."""
    from ._feed import EPOCH_END

    if steps < 1 or not 1 <= cache <= 256:
        raise ValueError(f"headspace(steps={steps}, cache={cache}): want steps >= 1 and cache in [1, 256]")
    meter = loader._stall
    meter.ask()  # the trainer asked: the batch in hand completes its step
    loader._stall = StallMeter(meter.clock, MAX_STEPS)  # fetching the cache is no step (and reports nothing)
    cached = []
    try:
        while len(cached) < cache:
            b = loader.next_batch()
            if b is None:
                if not loader.ended:  # an epoch's end: keep it for the trainer's own loop
                    loader._queue.appendleft((EPOCH_END, {"epoch": loader._epoch_ended}))
                break
            cached.append(_replayable(b))
            b.release()
    finally:
        loader._stall = meter
    if not cached:
        return
    clock, n, total = meter.clock, 0, 0.0
    try:
        for i in range(steps):
            t = clock()
            yield cached[i % len(cached)]
            total += clock() - t
            n += 1
    finally:
        if n:
            meter.headspace(n, total)
