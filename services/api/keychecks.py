"""Checking a key this API process has not verified before: one scrypt run (~70 ms and
16 MiB) in a thread, so the checks are throttled before they run.

Each client address has a bucket of checks (SAGALINE_API_KEY_FAILURES_BURST, refilled at
SAGALINE_API_KEY_FAILURES_PER_S): a check takes a token and a key that passes gives it
back, so only keys that were not valid spend them. The process runs at most
SAGALINE_API_KEY_CHECKS_AT_ONCE checks at once, and refuses one more rather than queue it:
a queue would let keys from many addresses hold every legitimate new key behind them, and
a 429 tells its client when to come back. Both refusals are 429s with Retry-After, decided
before any scrypt run. A key with a wrong shape is refused without a check (services.keys).
"""

from __future__ import annotations

import asyncio

from fastapi import HTTPException

from services.api.ratelimit import TokenBuckets, retry_after
from services.keys import Keyring, StoredKey

MAX_ADDRESSES = 10_000
"""Client addresses whose buckets are kept; past it the least recently seen is forgotten.
Many addresses can thus reset their buckets, but not run more checks at once."""


class KeyChecks:
    def __init__(self, failures: TokenBuckets, at_once: int) -> None:
        self.failures = failures
        self.at_once = at_once
        self.running = 0
        """Checks whose thread has not finished (a client that went away included)."""

    async def verify(self, keyring: Keyring, presented: str, address: str) -> StoredKey | None:
        """The stored key ``presented`` is, or None; a 429 HTTPException when ``address``
        presented too many keys that were not valid, or too many checks are running."""
        wait = self.failures.take(address)
        if wait > 0:
            raise _too_many(
                "too many API keys that were not valid came from this address: at most "
                f"{self.failures.rate_per_s:g} per second (bursts of {self.failures.burst}); "
                "retry after the Retry-After seconds",
                wait,
            )
        if self.running >= self.at_once:
            self.failures.give_back(address)
            raise _too_many(
                f"this API is checking as many new API keys as it may at once ({self.at_once}); "
                "retry after the Retry-After seconds",
                1.0,
            )
        self.running += 1
        # Shielded: a client that goes away does not free its slot before its thread ends.
        stored = await asyncio.shield(self._check(keyring, presented))
        if stored is not None:
            self.failures.give_back(address)
        return stored

    async def _check(self, keyring: Keyring, presented: str) -> StoredKey | None:
        try:
            return await asyncio.to_thread(keyring.authenticate, presented)
        finally:
            self.running -= 1


def _too_many(message: str, wait_s: float) -> HTTPException:
    return HTTPException(429, message, headers={"Retry-After": retry_after(wait_s)})
