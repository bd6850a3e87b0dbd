"""The Faust worker with a bounded shutdown (see :mod:`runtime.shutdown`).

mode's ``Worker`` installs its own SIGTERM/SIGINT handlers on the event loop and stops the
app from there; with the broker gone that stop can wait forever (aiokafka's fetcher never
closes). The handlers below arm the watchdog first, then do what mode does. A stop first
runs ``before_stop`` (the runners store what they hold pending), within half the grace, so
that Faust's own stop keeps the other half.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import faust

from runtime.shutdown import Watchdog
from services.worker.faust_seam import SignalHookedWorker

log = logging.getLogger(__name__)

UNDONE = (
    "exiting without a final offset commit (broker unreachable?) — nothing is lost: "
    "processing resumes from the stored positions"
)


class BoundedWorker(SignalHookedWorker):
    before_stop: Callable[[], Awaitable[None]] | None = None

    def __init__(
        self,
        app: faust.App,
        *,
        grace_s: float,
        before_stop: Callable[[], Awaitable[None]] | None = None,
        **kwargs: Any,
    ) -> None:
        self.watchdog = Watchdog("worker", grace_s, UNDONE)
        self.before_stop = before_stop
        self._before_stop_s = grace_s / 2
        super().__init__(app, **kwargs)

    def before_signal(self, signum: int) -> None:
        self.watchdog.arm(signum)

    async def stop(self) -> None:
        # Any stop is bounded, not only a signal's: after Faust's fetcher crashed (aiokafka's
        # KeyError in fetched_records when a seek from another thread met a fetch in flight,
        # robinhood/aiokafka#19) the app's stop waited for its streams forever and the
        # process stayed up doing nothing (a fault run's worker, 4 minutes). It now ends
        # after the grace, non-zero, and its supervisor starts it again; the stored
        # positions lose nothing.
        self.watchdog.arm()
        if self.before_stop is not None:
            before, self.before_stop = self.before_stop, None  # once, however many stops
            try:
                await asyncio.wait_for(before(), self._before_stop_s)
            except Exception as exc:  # nothing is lost: the next start decides it again
                log.warning(
                    "worker: pending states not stored before stopping (%s: %s); the next "
                    "start decides their records again from the stored positions",
                    type(exc).__name__,
                    exc,
                )
        await super().stop()
