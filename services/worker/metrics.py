"""Counters of what each agent did; logged periodically and served by the worker's web server."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from runtime.gc_tuning import CLOCK
from services.worker.prometheus import WorkerPrometheus


@dataclass
class Metrics:
    counts: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    prom: WorkerPrometheus = field(default_factory=WorkerPrometheus)
    """The same counts and more, for Prometheus (served at /metrics)."""

    def inc(self, process: str, what: str, n: int = 1) -> None:
        self.counts[f"{process}.{what}"] += n

    def add_time(self, process: str, what: str, seconds: float) -> None:
        """Time spent in one stage of batch handling (decide, publish, store)."""
        self.seconds[f"{process}.{what}_s"] += seconds

    def snapshot(self) -> dict[str, float]:
        merged: dict[str, float] = {**self.counts}
        merged.update({k: round(v, 3) for k, v in self.seconds.items()})
        merged.update(CLOCK.snapshot())
        return dict(sorted(merged.items()))
