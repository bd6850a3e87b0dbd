"""The worker's stop is bounded whatever starts it: a signal, or a crash of Faust's consumer."""

from __future__ import annotations

import asyncio
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


def _worker(grace_s: float, before_stop: object, steps: list[object]) -> BoundedWorker:
    worker = BoundedWorker.__new__(BoundedWorker)  # no app: only the stop path is tested
    worker.watchdog = Watchdog("worker", grace_s, bounded.UNDONE)
    worker.watchdog.arm = lambda signum=None: steps.append("armed")  # type: ignore[method-assign]
    worker.before_stop = before_stop  # type: ignore[assignment]
    worker._before_stop_s = grace_s / 2
    return worker


async def test_the_runners_store_what_is_pending_before_faust_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    steps: list[object] = []

    async def store() -> None:
        steps.append("stored")

    async def rest_of_stop(self: object) -> None:
        steps.append("faust stops")

    monkeypatch.setattr(bounded.faust.Worker, "stop", rest_of_stop)
    worker = _worker(8.0, store, steps)
    await worker.stop()
    await worker.stop()  # a second stop (Faust's own, after the signal's) stores nothing more
    assert steps == ["armed", "stored", "faust stops", "armed", "faust stops"]


async def test_a_store_that_hangs_gives_faust_half_the_grace(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    steps: list[object] = []

    async def hang() -> None:
        await asyncio.Event().wait()  # the broker is gone: the changelog never acknowledges

    async def rest_of_stop(self: object) -> None:
        steps.append(asyncio.get_running_loop().time())

    monkeypatch.setattr(bounded.faust.Worker, "stop", rest_of_stop)
    started = asyncio.get_running_loop().time()
    await _worker(0.2, hang, steps).stop()
    assert steps[0] == "armed" and 0.1 <= steps[1] - started < 0.2  # type: ignore[operator]
    assert "the next start decides their records again" in caplog.text
