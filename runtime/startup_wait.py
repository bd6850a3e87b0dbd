"""Starting before the broker or the database is up: a worker, projector or API started beside
a broker that is not listening yet (a fresh `make run`, a rebooted node, a rollout of both)
waits for it, for up to SAGALINE_KAFKA_STARTUP_WAIT_S, and a projector for its database for
up to SAGALINE_DATABASE_STARTUP_WAIT_S, instead of exiting at once into a crash loop whose
back-off (Kubernetes doubles it up to five minutes) outlasts the dependency's own start.

Only silence is waited out (nothing listening, no answer, a name that does not resolve yet):
a server that answers and refuses -- a login, a certificate, the wrong protocol, a missing
database -- will refuse again, so that ends the start at once with its sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_PAUSE_S = 1.0
LONGEST_PAUSE_S = 10.0
"""Pauses double from the first to this: a broker that comes up is seen within 10 s."""


class Unreachable(RuntimeError):
    """A dependency could not be used at start: the sentence says where, how, and what it
    answered. Each kind names the setting that bounds the wait for it."""

    WAIT_SETTING = ""

    def __init__(self, message: str, *, silent: bool = False) -> None:
        super().__init__(message)
        self.silent = silent
        """Nothing answered (refused, closed, timed out): a server not up yet, which waiting
        may cure; false when it answered and refused (login, TLS, protocol, no database)."""


async def when_reachable(
    wait_s: float,
    start: Callable[[], Awaitable[T]],
    stop: asyncio.Event | None = None,
) -> T:
    """``start()``'s result, retried while it raises a silent :class:`Unreachable`, for
    ``wait_s`` seconds; then (or at once, for a refusal) that error goes on. A set ``stop``
    (SIGTERM while waiting) ends the wait with the last error too."""
    deadline = time.monotonic() + wait_s
    pause = FIRST_PAUSE_S
    while True:
        try:
            with _client_says_nothing():
                return await start()
        except Unreachable as exc:
            left = deadline - time.monotonic()
            if not exc.silent or left <= 0:
                raise
            pause = min(pause, left)
            log.warning(
                "%s; trying again in %.0f s (%s: %.0f s left)",
                exc,
                pause,
                exc.WAIT_SETTING,
                left,
            )
            await _sleep(pause, stop)
            if stop is not None and stop.is_set():
                raise
            pause = min(pause * 2, LONGEST_PAUSE_S)


UNABLE_TO_CONNECT = 'Unable connect to "'
"""How aiokafka's client logs (at ERROR, logger ``aiokafka``) each bootstrap server it could
not reach: while a start is waited for, the wait's own line says it with the reason."""


class _NoBootstrapErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (isinstance(record.msg, str) and record.msg.startswith(UNABLE_TO_CONNECT))


@contextlib.contextmanager
def _client_says_nothing() -> Iterator[None]:
    """aiokafka's line per unreachable bootstrap server left out while a start is tried."""
    client_log, quiet = logging.getLogger("aiokafka"), _NoBootstrapErrors()
    client_log.addFilter(quiet)
    try:
        yield
    finally:
        client_log.removeFilter(quiet)


async def _sleep(seconds: float, stop: asyncio.Event | None) -> None:
    if stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
