"""Token buckets per caller: how many commands a key may send per second and at once, and
how many keys that were not valid a client address may present (services.api.keychecks).

Kept in the memory of one API process: behind a load balancer each process allows the
rate, so N processes allow N times it (README, "API keys"). Command buckets are keyed by
key id, so there are at most as many as there are keys (one shared bucket when auth is
off); buckets keyed by address are bounded by ``max_callers``.
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
    max_callers: int | None = None
    """Most buckets kept: past it the least recently used is dropped (it starts full again
    if its caller comes back). None: no bound (callers are key ids, a bounded set)."""
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    """caller -> (tokens left, when they were counted), least recently used first"""

    def take(self, caller: str) -> float:
        """Spend one token of ``caller``'s bucket: 0.0 when there was one, else the seconds
        until there is one (nothing is spent then)."""
        now = self.clock()
        tokens = self._tokens(caller, now)
        if tokens >= 1.0:
            self._keep(caller, tokens - 1.0, now)
            return 0.0
        self._keep(caller, tokens, now)
        return (1.0 - tokens) / self.rate_per_s

    def give_back(self, caller: str) -> None:
        """Return a token :meth:`take` spent (never more than the burst)."""
        now = self.clock()
        self._keep(caller, min(float(self.burst), self._tokens(caller, now) + 1.0), now)

    def _tokens(self, caller: str, now: float) -> float:
        tokens, then = self._buckets.get(caller, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - then) * self.rate_per_s)

    def _keep(self, caller: str, tokens: float, now: float) -> None:
        if self.max_callers is None:
            self._buckets[caller] = (tokens, now)
            return
        self._buckets.pop(caller, None)  # re-inserted last: the most recently used
        self._buckets[caller] = (tokens, now)
        if len(self._buckets) > self.max_callers:
            del self._buckets[next(iter(self._buckets))]


def retry_after(wait_s: float) -> str:
    """A Retry-After header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))
