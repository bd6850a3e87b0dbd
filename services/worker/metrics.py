"""Counters of what each agent did; logged periodically and served by the worker's web server."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Metrics:
    counts: Counter[str] = field(default_factory=Counter)

    def inc(self, process: str, what: str, n: int = 1) -> None:
        self.counts[f"{process}.{what}"] += n

    def snapshot(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))
