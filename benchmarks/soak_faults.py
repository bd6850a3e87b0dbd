"""What the long run (bench_soak) does to its workers on schedule, for issue 25, and what it
measures of each: a worker SIGKILLed (the others and their standbys take its partitions; it
comes back a minute later on its own data directory), and a worker restarted on an empty
data directory (it recovers its tables from the changelogs).

Each event is timed per partition of the order saga in two ways: seconds from the event to
the first outcome of an order sent after it there, which includes working off the queue that
gathered while the partition was down (the soak's steady orders cover every partition within
a second); and seconds to the first outcome written there after it, of any order: when the
partition was processed again.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from benchmarks import soak_state
from tests.integration.harness import Worker


@dataclass
class Event:
    kind: str
    minute: float
    at: float
    """Loop time of the kill or stop."""
    wall: float = field(default_factory=time.time)
    """Wall-clock time of the kill or stop (records carry wall-clock timestamps)."""
    restarted_at: float = 0.0
    ready_at: float = 0.0
    """Loop time the restarted worker reported ready."""
    notes: list[str] = field(default_factory=list)


async def sigkill(
    worker: Worker, minute: float, back_after_s: float, survivors: list[Worker]
) -> Event:
    """SIGKILL ``worker``; restart it on its own data directory ``back_after_s`` later.
    Noted apart: when the survivors were ready again (the group's own handover: the session
    expiring, the rebalance, the standbys promoted), which the per-partition times include
    with the queue the survivors then work through."""
    loop = asyncio.get_running_loop()
    event = Event("sigkill", minute, loop.time())
    killed_at = datetime.now()  # local, as the workers stamp their log lines
    await asyncio.to_thread(worker.kill)
    await asyncio.sleep(back_after_s)
    ready = soak_state.all_ready_after([w.log for w in survivors if w.log], killed_at)
    event.notes.append(
        "survivors ready again "
        + (f"{(ready - killed_at).total_seconds():.1f} s after it" if ready else "not seen")
    )
    event.restarted_at = loop.time()
    await asyncio.to_thread(worker.start, 300)
    event.ready_at = loop.time()
    return event


async def empty_restart(worker: Worker, minute: float) -> Event:
    """Stop ``worker`` (SIGTERM: it leaves the group at once), delete its data directory,
    start it again: it recovers every table partition it is given from the changelogs."""
    loop = asyncio.get_running_loop()
    event = Event("empty data directory", minute, loop.time())
    await asyncio.to_thread(worker.stop)
    shutil.rmtree(worker.settings.data_dir, ignore_errors=True)
    event.restarted_at = loop.time()
    started = time.monotonic()
    await asyncio.to_thread(worker.start, 600)
    ready_s = time.monotonic() - started
    event.ready_at = loop.time()
    took = soak_state.recoveries(worker.log)
    offsets = soak_state.offsets_to_recover(worker.log)
    recovery = took[0] if took else float("nan")
    rate = offsets / recovery if recovery and recovery == recovery else float("nan")
    event.notes.append(
        f"started and ready in {ready_s:.1f} s; first recovery read {offsets} changelog "
        f"offsets (an upper bound on records) in {recovery:.2f} s ({rate:,.0f} offsets/s)"
    )
    return event


def describe(
    event: Event,
    done: list[tuple[float, float, str, int]],
    written: list[tuple[float, int]],
    partitions: int,
) -> str:
    back = soak_state.back_after(done, event.at)
    resumed = soak_state.resumed_after(written, event.wall)
    line = (
        f"{event.kind} at minute {event.minute:g}: every partition processing again "
        f"{_per_partition(back, partitions)}; resumed (its first outcome written after it, "
        f"of any order) {_per_partition(resumed, partitions)}"
    )
    return "; ".join([line, *event.notes])


def _per_partition(seconds: dict[int, float], partitions: int) -> str:
    """The worst of ``seconds`` and each partition's, and the partitions without any."""
    worst = max(seconds.values()) if seconds else float("nan")
    shown = " ".join(f"p{p}={s:.1f}" for p, s in sorted(seconds.items()))
    text = f"{worst:.1f} s after it ({shown})"
    if missing := sorted(set(range(partitions)) - set(seconds)):
        text += f", no order ended since on {missing}"
    return text


WINDOW_AFTER_READY_S = 30.0
"""A fault's window lasts until this long after its worker is ready again: the rebalance its
return starts, and its recovery, fall inside."""


def in_window(sent: float, events: list[Event]) -> bool:
    """Whether an order sent at ``sent`` (loop time) met a fault: sent from the fault until
    ``WINDOW_AFTER_READY_S`` after its worker was ready again."""
    return any(e.at <= sent <= e.ready_at + WINDOW_AFTER_READY_S for e in events)


async def at_minutes(
    start: float, plan: list[tuple[float, Callable[[], object]]], events: list[Event]
) -> None:
    """Run each planned action at its minute of the soak (loop time ``start``)."""
    loop = asyncio.get_running_loop()
    for minute, action in sorted(plan, key=lambda p: p[0]):
        await asyncio.sleep(max(0.0, start + minute * 60 - loop.time()))
        result = action()
        if asyncio.iscoroutine(result):
            events.append(await result)
