"""Data-stall accounting from the trainer's side (docs/feed-protocol.md,
the release's "stall" field): per step, how long the trainer waited for
its batch and how long it spent before asking for the next one."""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional

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

    __slots__ = ("steps", "wait", "compute")

    def __init__(self, steps: int = 0, wait: float = 0.0, compute: float = 0.0) -> None:
        self.steps, self.wait, self.compute = steps, wait, compute

    @property
    def share(self) -> float:
        t = self.wait + self.compute
        return self.wait / t if t > 0 else 0.0

    def __repr__(self) -> str:
        return f"Stall(steps={self.steps}, wait={self.wait:.3f}s, compute={self.compute:.3f}s, share={self.share:.1%})"


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

    def due(self) -> bool:
        return len(self._wait_us) >= self.every

    def take(self) -> Optional[Dict[str, List[int]]]:
        """The steps not yet reported (at most MAX_STEPS), as the release's
        "stall" field; None if there are none."""
        if not self._wait_us:
            return None
        w, c = self._wait_us[:MAX_STEPS], self._compute_us[:MAX_STEPS]
        del self._wait_us[:MAX_STEPS], self._compute_us[:MAX_STEPS]
        return {"wait_us": w, "compute_us": c}
