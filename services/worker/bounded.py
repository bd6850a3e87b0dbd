"""The Faust worker with a bounded shutdown (see :mod:`runtime.shutdown`).

mode's ``Worker`` installs its own SIGTERM/SIGINT handlers on the event loop and stops the
app from there; with the broker gone that stop can wait forever (aiokafka's fetcher never
closes). The handlers below arm the watchdog first, then do what mode does.
"""

from __future__ import annotations

from typing import Any

import faust

from runtime.shutdown import Watchdog
from services.worker.faust_seam import SignalHookedWorker

UNDONE = (
    "exiting without a final offset commit (broker unreachable?) — nothing is lost: "
    "processing resumes from the stored positions"
)


class BoundedWorker(SignalHookedWorker):
    def __init__(self, app: faust.App, *, grace_s: float, **kwargs: Any) -> None:
        self.watchdog = Watchdog("worker", grace_s, UNDONE)
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
        await super().stop()
