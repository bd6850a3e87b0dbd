"""The worker's stop is bounded whatever starts it: a signal, or a crash of Faust's consumer."""

from __future__ import annotations

import signal

import faust
import pytest

from runtime.shutdown import Watchdog
from services.worker import bounded
from services.worker.bounded import BoundedWorker

pytestmark = pytest.mark.unit


class _Stopped(Exception):
    """Stands for the rest of mode's stop (which needs a running app)."""


async def test_a_stop_that_no_signal_started_arms_the_watchdog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    armed: list[int | None] = []

    async def rest_of_stop(self: object) -> None:
        raise _Stopped

    worker = BoundedWorker.__new__(BoundedWorker)  # no app: only the stop path is tested
    worker.watchdog = bounded.Watchdog("worker", 8.0, bounded.UNDONE)
    monkeypatch.setattr(worker.watchdog, "arm", lambda signum=None: armed.append(signum))
    monkeypatch.setattr(bounded.faust.Worker, "stop", rest_of_stop)
    with pytest.raises(_Stopped):
        await worker.stop()
    assert armed == [None]


@pytest.mark.parametrize(
    ("handler", "signum"), [("_on_sigterm", signal.SIGTERM), ("_on_sigint", signal.SIGINT)]
)
def test_a_stop_signal_arms_the_watchdog_before_mode_stops_the_worker(
    handler: str, signum: signal.Signals, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps: list[object] = []
    worker = BoundedWorker.__new__(BoundedWorker)  # no app: only the signal path is tested
    worker.watchdog = Watchdog("worker", 8.0, bounded.UNDONE)
    monkeypatch.setattr(worker.watchdog, "arm", lambda signum=None: steps.append(signum))
    monkeypatch.setattr(faust.Worker, handler, lambda self: steps.append("mode stops"))
    getattr(worker, handler)()  # what mode's loop calls on the signal
    assert steps == [signum, "mode stops"]
