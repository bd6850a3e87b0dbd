"""A token bucket per caller: how many commands a key may send per second, and at once.

Kept in the memory of one API process: behind a load balancer each process allows the
rate, so N processes allow N times it (README, "API keys"). Buckets are keyed by key id,
so there are at most as many as there are keys (one shared bucket when auth is off).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class TokenBuckets:
    rate_per_s: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    """caller -> (tokens left, when they were counted)"""

    def take(self, caller: str) -> float:
        """Spend one token of ``caller``'s bucket: 0.0 when there was one, else the seconds
        until there is one (nothing is spent then)."""
        now = self.clock()
        tokens, then = self._buckets.get(caller, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - then) * self.rate_per_s)
        if tokens >= 1.0:
            self._buckets[caller] = (tokens - 1.0, now)
            return 0.0
        self._buckets[caller] = (tokens, now)
        return (1.0 - tokens) / self.rate_per_s


def retry_after(wait_s: float) -> str:
    """A Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))
