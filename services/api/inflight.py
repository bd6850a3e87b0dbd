"""The sagas in flight by type and version, for the API's ``/metrics`` and the console's
overview: what ``sagaline versions`` reads (``services.inflight``, the saga tables'
changelogs), read at most every ``SAGALINE_IN_FLIGHT_REFRESH_S`` and kept between readings.

The reading runs in a thread of its own (its own event loop and consumer), never on the
API's loop, and never on the worker's path: it only reads the changelogs. A caller waits
for a reading it started at most ``WAIT_S``, then gets the last one. A reading that fails
(the broker down) keeps the last values and counts the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import sagas.domains as domains
from runtime.settings import Settings
from sagas.catalog import SAGA_TYPES, running_channels
from sagas.machinery.process import Process
from services.api.metrics import ApiPrometheus
from services.inflight import ChannelVersions, count, read_changelog

log = logging.getLogger(__name__)

Reader = Callable[[], Sequence[ChannelVersions]]
"""One reading of every saga channel (blocking: it is run in a thread)."""

WAIT_S = 5.0
"""How long a request waits for a reading it started (a scrape times out at 10 s)."""


@dataclass(frozen=True)
class Reading:
    channels: tuple[ChannelVersions, ...] = ()
    read_at: datetime | None = None
    """When the values were read (None: not yet)."""
    failed: str | None = None
    """Why the last attempt failed, when it did (the values are then the previous ones)."""

    def counts(self) -> list[tuple[str, int, int]]:
        """(saga channel, version, in flight) for every version a channel lists, holds
        in flight or starts new instances on."""
        return [(c.channel, version, n) for c in self.channels for version, n, _ in c.rows()]


def saga_processes(settings: Settings) -> list[Process[Any]]:
    """The saga channels the worker runs (as ``sagaline versions`` counts them)."""
    running = set(running_channels(settings.cdc_enabled))
    return [
        p
        for domain in domains.DOMAINS
        for p in domain.build(settings)
        if p.name in running and (hasattr(p, "STATUSES") or hasattr(p, "newest"))
    ]


def saga_types(settings: Settings) -> dict[str, str]:
    """Each saga channel's saga type (``order-saga``: ``order``), the ``saga_type`` label
    the worker's saga metrics carry."""
    found = {}
    for process in saga_processes(settings):
        statuses = getattr(getattr(process, "newest", process), "STATUSES", None)
        named = [s.entity_type for s in SAGA_TYPES if s.statuses == statuses]
        found[process.name] = named[0] if named else process.name
    return found


def changelog_reader(settings: Settings) -> Reader:
    def read() -> list[ChannelVersions]:
        async def every() -> list[ChannelVersions]:
            return [
                count(p, await read_changelog(settings, p.name)) for p in saga_processes(settings)
            ]

        return asyncio.run(every())

    return read


class InFlight:
    """The last reading, read again when a caller asks after ``every_s`` since the last
    attempt (one at a time); published on ``metrics``' gauge."""

    def __init__(
        self,
        read: Reader,
        every_s: float,
        metrics: ApiPrometheus,
        *,
        saga_type: Callable[[str], str] = str,
        wait_s: float = WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``saga_type`` names a channel's saga type on the gauge (``saga_types``)."""
        self._saga_type = saga_type
        self._read = read
        self.every_s = every_s
        self.wait_s = wait_s
        self._metrics = metrics
        self._clock = clock
        self._next: float | None = None
        self._pending: asyncio.Future[Sequence[ChannelVersions]] | None = None
        self.reading = Reading()

    async def current(self) -> Reading:
        now = self._clock()
        if self._pending is not None or (self._next is not None and now < self._next):
            return self.reading  # a reading another request started is not waited for
        self._next = now + self.every_s
        self._pending = pending = self._start()
        pending.add_done_callback(self._done)
        await asyncio.wait({pending}, timeout=self.wait_s)
        return self.reading

    def _start(self) -> asyncio.Future[Sequence[ChannelVersions]]:
        """The reading in a daemon thread: neither the loop nor the process's exit waits
        for a broker that does not answer."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Sequence[ChannelVersions]] = loop.create_future()

        def settle(value: Sequence[ChannelVersions] | None, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value or ())

        def run() -> None:
            try:
                value, exc = self._read(), None
            except BaseException as error:  # reported on the loop, never lost in the thread
                value, exc = None, error
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
                loop.call_soon_threadsafe(settle, value, exc)

        threading.Thread(target=run, name="in-flight-reading", daemon=True).start()
        return future

    def _done(self, future: asyncio.Future[Sequence[ChannelVersions]]) -> None:
        self._pending = None
        exc = future.exception()
        if exc is not None:
            self._metrics.in_flight_read_failures.inc()
            log.warning("reading the sagas in flight failed, keeping the last values: %s", exc)
            self.reading = replace(self.reading, failed=f"{type(exc).__name__}: {exc}")
            return
        before = set(self._series())
        self.reading = Reading(tuple(future.result()), datetime.now(UTC))
        now = self._series()
        for labels, n in now.items():
            self._metrics.in_flight.labels(*labels).set(n)
        for labels in before - set(now):  # a version no longer listed nor in flight
            self._metrics.in_flight.remove(*labels)

    def _series(self) -> dict[tuple[str, str], int]:
        return {(self._saga_type(c), str(v)): n for c, v, n in self.reading.counts()}


def in_flight_of(settings: Settings, metrics: ApiPrometheus, wait_s: float = WAIT_S) -> InFlight:
    """The API process's cache: the saga tables of ``settings``, on ``metrics``' gauge."""
    types = saga_types(settings)
    return InFlight(
        changelog_reader(settings),
        settings.in_flight_refresh_s,
        metrics,
        saga_type=lambda channel: types.get(channel, channel),
        wait_s=wait_s,
    )
