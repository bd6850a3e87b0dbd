"""The timer that fires deadlines: it keeps each runner's deadline index current and sends
a tick per due key to the key's own process topic."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import faust

from runtime.settings import Settings
from sagas.contracts.system import Tick
from sagas.ids import derive_id
from sagas.messages import Envelope
from services.worker.faust_seam import changing_hands, send_record
from services.worker.runner import ProcessRunner
from services.worker.tracing import DEADLINE_HEADER

log = logging.getLogger(__name__)


def register_deadline_timer(
    app: faust.App, settings: Settings, runners: list[ProcessRunner]
) -> None:
    async def mark_stale(*args: Any, **kwargs: Any) -> None:
        for runner in runners:
            runner.deadlines.stale = True

    app.on_rebalance_complete.connect(mark_stale)

    @app.timer(interval=settings.deadline_poll_ms / 1000)  # type: ignore[untyped-decorator]
    async def fire_deadlines() -> None:
        def moving() -> bool:
            return changing_hands(app)

        if moving():
            return  # the index is rebuilt once this worker's tables are recovered
        for runner in runners:
            try:
                if runner.deadlines.needs_rebuild(app.loop.time()):
                    await _rebuild(runner, app.loop.time(), moving)
                elif runner.deadlines.needs_extension(datetime.now(UTC)):
                    await runner.extend_deadlines(moving)
                if moving():
                    return
                await send_ticks(app, settings.topic(runner.process.name), runner)
            except Exception:
                # An exception out of a timer ends it: no deadline would fire again.
                log.exception("%s: deadlines failed; trying again at the next poll", runner.name)


async def _rebuild(runner: ProcessRunner, now: float, interrupted: Callable[[], bool]) -> None:
    started = time.perf_counter()
    done = await runner.rebuild_deadlines(now, interrupted)
    log.info(
        "%s: %s: %d keys with deadlines due within %s; %d index entries read (and %d records "
        "read, %d decoded, to index a partition written before entries), in %.2f s",
        runner.name,
        "deadline index rebuilt" if done else "a rebalance interrupted the deadline rebuild",
        len(runner.deadlines),
        runner.deadlines.horizon,
        runner.last_entries_read,
        *runner.last_deadline_scan,
        time.perf_counter() - started,
    )


async def send_ticks(app: faust.App, topic: str, runner: ProcessRunner) -> None:
    """A tick per due key, each acknowledged; a key whose tick was not is kept due (its
    deadline would otherwise wait for the next rebuild: services/worker/deadlines.py)."""
    now = datetime.now(UTC)
    due = runner.deadlines.pop_due(now)
    sent: list[tuple[str, datetime, Awaitable[Any]]] = []
    traced = runner.tracing is not None
    try:
        for key, when in due:
            # Traced, the tick says which deadline it fires for: its span links to the
            # context the key kept with that deadline (ProcessRunner._remembered).
            headers = [(DEADLINE_HEADER, when.isoformat().encode())] if traced else None
            future = await send_record(app, topic, key.encode(), _tick(key, now), None, headers)
            sent.append((key, when, future))
    finally:
        for key, when in due[len(sent) :]:
            runner.deadlines.retry(key, when)
    results = await asyncio.gather(*(f for _, _, f in sent), return_exceptions=True)
    failed = [
        (key, when)
        for (key, when, _), r in zip(sent, results, strict=True)
        if isinstance(r, BaseException)
    ]
    for key, when in failed:
        runner.deadlines.retry(key, when)
    if failed:
        log.warning("%s: %d tick(s) not delivered; they are sent again", runner.name, len(failed))


def _tick(key: str, now: datetime) -> bytes:
    tick = Envelope.wrap(
        Tick(), message_id=derive_id(key, f"tick@{now.isoformat()}"), key=key, occurred_at=now
    )
    return tick.encode()
