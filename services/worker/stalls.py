"""Input partitions that have records waiting and do not move: the worker's own stall check,
in place of Faust's livelock detector (off in the worker, and why:
``faust_seam.quiet_faust_livelock_detector``).

What an operator needs: which partition has records waiting past the next offset
to process and has not moved for ``after_s``. It is logged once when it begins and once
when it moves again, and counted in ``sagaline_worker_stalled_partitions``. A rebalance or
recovery restarts every clock (a new owner reads its changelogs first).

An end offset beyond the position is not proof that a record waits: retention may have
deleted the offsets, and a transactional producer's commit markers (and aborted records)
hold offsets the worker never sees. So before a partition is called stalled the broker is
asked where its first record at or after the position is (the probe a seek back over a gap
uses). No record before the end offset (or none found in the probe's wait) and it is not,
until its position or its end offset moves; a probe that fails is asked again next turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import faust

from services.worker.agents import Batched
from services.worker.faust_seam import changing_hands
from services.worker.runner import FirstOffset

log = logging.getLogger(__name__)

Partition = tuple[str, int]


@dataclass(frozen=True)
class Stall:
    topic: str
    partition: int
    position: int | None
    """The next offset to process (None: none processed yet, the partition's first)."""
    end: int
    """The partition's end offset as last fetched."""
    since_s: float
    """How long it has been behind at ``position``."""


@dataclass
class _Watched:
    position: int | None
    end: int | None
    since: float
    reported: bool = False
    nothing_waits: bool = False
    """The broker said no record lies between ``position`` and ``end``."""


class StallWatch:
    """Pure: fed the positions and end offsets of the partitions owned now, says which may
    have stalled (behind and unmoved for ``after_s``: the caller asks the broker, then
    :meth:`confirm` or :meth:`nothing_waits`) and which moved again after a stall."""

    def __init__(self, after_s: float, judge_unstarted: bool = True) -> None:
        self.after_s = after_s
        self.judge_unstarted = judge_unstarted
        """Whether a partition with no position (nothing processed, none stored) is judged
        from offset 0: so when the worker starts such a partition at its earliest record,
        not when it starts at the group's committed offset (SAGALINE_START_WITHOUT_POSITION),
        below which records wait that the worker will never process."""
        self._watched: dict[Partition, _Watched] = {}

    @property
    def stalled(self) -> int:
        return sum(w.reported for w in self._watched.values())

    def forget(self) -> None:
        self._watched.clear()

    def observe(
        self, now: float, owned: Mapping[Partition, tuple[int | None, int | None]]
    ) -> tuple[list[Stall], list[Partition]]:
        """``owned``: per partition, (next offset to process, end offset); an end of None
        (nothing fetched yet) is not judged. Returns (candidates, partitions moving again)."""
        candidates: list[Stall] = []
        moving: list[Partition] = []
        for tp in self._watched.keys() - owned.keys():
            del self._watched[tp]
        for tp, (position, end) in owned.items():
            started = position is not None or self.judge_unstarted
            behind = started and end is not None and (position or 0) < end
            seen = self._watched.get(tp)
            if seen is None or seen.position != position or not behind:
                if seen is not None and seen.reported:
                    moving.append(tp)
                self._watched[tp] = _Watched(position, end, now)
                continue
            if seen.end != end:  # more records came while it stood: ask the broker again
                seen.end, seen.nothing_waits = end, False
            if seen.reported or seen.nothing_waits or now - seen.since < self.after_s:
                continue
            assert end is not None
            candidates.append(Stall(tp[0], tp[1], position, end, now - seen.since))
        return candidates, moving

    def confirm(self, stall: Stall) -> None:
        self._watched[(stall.topic, stall.partition)].reported = True

    def nothing_waits(self, stall: Stall) -> None:
        self._watched[(stall.topic, stall.partition)].nothing_waits = True


def describe(stall: Stall, first: int) -> str:
    at = "its first record" if stall.position is None else f"offset {stall.position}"
    return (
        f"{stall.topic}[{stall.partition}]: a record waits at offset {first} (end offset "
        f"{stall.end}) and nothing was processed from {at} for {stall.since_s:.0f} s; the "
        "partition's records are not being processed"
    )


@dataclass(frozen=True)
class Watched:
    """What the check reads of one input topic's consumer."""

    next_offset: Callable[[str, int], int | None]
    first_offset: FirstOffset


def register_stall_check(
    app: faust.App,
    consumers: Iterable[Batched],
    after_s: float,
    count: Callable[[int], None],
    judge_unstarted: bool = True,
) -> StallWatch:
    """Every tenth of ``after_s`` (at least each second), :func:`check_stalls`."""
    by_topic = {
        topic: Watched(c.positions.next_offset, c.first_offset)
        for c in consumers
        for topic in c.input_topics
    }
    watch = StallWatch(after_s, judge_unstarted)

    @app.timer(interval=max(1.0, after_s / 10))  # type: ignore[untyped-decorator]
    async def check() -> None:
        try:
            await check_stalls(app, by_topic, watch, count)
        except Exception:  # an exception out of a timer would end it
            log.exception("the stall check failed; trying again at its next turn")

    return watch


async def check_stalls(
    app: Any, by_topic: Mapping[str, Watched], watch: StallWatch, count: Callable[[int], None]
) -> None:
    """Feed ``watch`` the owned input partitions, ask the broker about each candidate, log
    what begins and ends; ``count`` gets how many are stalled now. Mid-rebalance or
    recovery every clock restarts."""
    if changing_hands(app):
        watch.forget()
        count(0)
        return
    owned = {
        (tp.topic, tp.partition): (by_topic[tp.topic].next_offset(*tp), _end(app, tp))
        for tp in app.consumer.assignment()
        if tp.topic in by_topic
    }
    candidates, moving = watch.observe(app.loop.time(), owned)
    for stall in candidates:
        probe = by_topic[stall.topic].first_offset
        try:
            first = await probe(stall.topic, stall.partition, stall.position or 0)
        except Exception as exc:  # the broker away, say: asked again at the next turn
            log.debug("%s[%d]: not judged (%s)", stall.topic, stall.partition, exc)
            continue
        if first is None or first >= stall.end:
            watch.nothing_waits(stall)
        else:
            watch.confirm(stall)
            log.error("stalled: %s", describe(stall, first))
    for topic, partition in moving:
        log.info("%s[%d]: moving again after a stall", topic, partition)
    count(watch.stalled)


def _end(app: Any, tp: Any) -> int | None:
    """The partition's end offset as the consumer last fetched it (no request)."""
    try:
        end = app.consumer.highwater(tp)
    except Exception:  # not assigned any more (a rebalance began): not judged this time
        return None
    return None if end is None else int(end)
