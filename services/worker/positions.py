"""Where each input partition resumes: the worker's own record of what it has processed.

Faust's committed offset is only a hint. Faust acks a batch's events in a ``finally`` (so a
batch whose handler raised counts as done), and its offset bookkeeping across rebalances
and read-offset gaps has a record of moving past records nobody processed. So the runner
keeps, per input partition, the next offset it must process, and stores it in the
process's table *after* the batch's states (same table partition, same changelog
partition, changelog before the local store: whoever recovers the position also recovers
every state it covers; see ``FaustTable`` in :mod:`services.worker.faust_table`).

:class:`InputPositions` decides, record by record, what to do with what the consumer
delivers:

- the expected offset: process it;
- below it: already processed (a replay after a crash or a seek), skip it;
- above it: a gap. Do not process it, nor anything else past the gap: ask for a seek back to
  the expected offset, and skip what the consumer had already fetched (which may arrive in
  several runs, some even repeated). Should the expected offset not have come
  :data:`RESEEK_AFTER_S` after the request, the seek is asked for again: when records past
  the gap arrive (:meth:`InputPositions.plan`), and when none do (:meth:`InputPositions.overdue`,
  on a timer). A seek can be lost with nothing after it: Faust's delivery loop goes on
  with the records it fetched before the seek and raises its read offset over them, then
  drops the records the seek fetches again as already read (RELIABILITY.md, defect 13).

Whether the missing offsets exist at all (retention may have deleted them; transaction
markers leave holes) is not guessed from what arrives: the runner asks the broker before
it seeks (see :meth:`InputPositions.skip_missing`).

Planning is pure and does not move the positions: a batch whose effects fail is planned
again, identically, on retry; :meth:`InputPositions.commit` moves them once it is durable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Verdict = Literal["process", "replayed", "past_gap", "stale"]

POSITION_KEY_PREFIX = "\x00position/"
"""Table keys of input positions (value: the next offset, in ASCII digits). No entity key
can start with a control character (envelope keys must be printable), so none collides."""


def position_key(topic: str, partition: int) -> str:
    # The partition is part of the key as well: the memory store is one dict for all.
    return f"{POSITION_KEY_PREFIX}{topic}/{partition}"


def parse_position_key(key: str) -> tuple[str, int] | None:
    """(topic, partition) of a position key; None for an entity's key."""
    if not key.startswith(POSITION_KEY_PREFIX):
        return None
    topic, _, partition = key[len(POSITION_KEY_PREFIX) :].rpartition("/")
    return topic, int(partition)


class Positioned(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...


RESEEK_AFTER_S = 5.0
"""The expected offset not come this long after a seek back: the seek was lost (a rebalance's
own seek, say, or Faust's delivery loop); ask for it again."""


@dataclass
class _Partition:
    expected: int | None
    """The next offset to process; None: nothing processed here yet, take what comes."""
    rewound_at: float | None = None
    """When a seek back to ``expected`` was last asked for (monotonic seconds)."""


@dataclass(frozen=True)
class Rewind:
    topic: str
    partition: int
    offset: int


@dataclass
class Plan:
    """What to do with one batch; see :meth:`InputPositions.plan`."""

    verdicts: list[Verdict]
    rewinds: list[Rewind]
    _after: dict[tuple[str, int], _Partition] = field(repr=False)

    def admitted(self, records: Iterable[Any]) -> list[Any]:
        return [r for r, v in zip(records, self.verdicts, strict=True) if v == "process"]

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per partition whose position moved: the next offset to process."""
        return {tp: p.expected for tp, p in self._after.items() if p.expected is not None}


LoadPosition = Callable[[str, int], int | None]


class InputPositions:
    def __init__(self, load: LoadPosition) -> None:
        self._load = load
        self._partitions: dict[tuple[str, int], _Partition] = {}

    def forget(self) -> None:
        """After a rebalance: positions are read again from the (recovered) table."""
        self._partitions.clear()

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The next offset to process on a partition (None: none processed, none stored)."""
        return self._current((topic, partition)).expected

    def plan(self, records: Iterable[Positioned], now: float) -> Plan:
        after: dict[tuple[str, int], _Partition] = {}
        verdicts: list[Verdict] = []
        rewinds: list[Rewind] = []
        for record in records:
            tp = (record.topic, record.partition)
            if tp not in after:
                after[tp] = self._current(tp)
            part = after[tp]
            verdict = _admit(part, record.offset, now)
            verdicts.append(verdict)
            if verdict == "past_gap" and part.expected is not None:
                rewinds.append(Rewind(record.topic, record.partition, part.expected))
        return Plan(verdicts, rewinds, after)

    def commit(self, plan: Plan) -> None:
        self._partitions.update(plan._after)

    def overdue(self, now: float) -> list[Rewind]:
        """The seeks back asked for :data:`RESEEK_AFTER_S` or more before ``now`` whose
        expected offset has not come since, asked for again (and timed from ``now``)."""
        due = []
        for (topic, partition), part in self._partitions.items():
            if part.expected is None or part.rewound_at is None:
                continue
            if now - part.rewound_at >= RESEEK_AFTER_S:
                part.rewound_at = now
                due.append(Rewind(topic, partition, part.expected))
        return due

    def skip_missing(self, topic: str, partition: int, missing_from: int, exists_from: int) -> bool:
        """The broker says offsets ``missing_from .. exists_from - 1`` do not exist: expect
        ``exists_from`` instead. False (and nothing changes) when the position has moved on."""
        part = self._partitions.get((topic, partition))
        if part is None or part.expected != missing_from or exists_from <= missing_from:
            return False
        part.expected = exists_from
        return True

    def _current(self, tp: tuple[str, int]) -> _Partition:
        known = self._partitions.get(tp)
        if known is None:
            return _Partition(self._load(*tp))
        return _Partition(known.expected, known.rewound_at)


def _admit(part: _Partition, offset: int, now: float) -> Verdict:
    """Update ``part`` for one delivered offset."""
    if part.expected is None or offset == part.expected:
        part.expected, part.rewound_at = offset + 1, None
        return "process"
    if offset < part.expected:
        return "replayed"
    if part.rewound_at is None or now - part.rewound_at >= RESEEK_AFTER_S:
        part.rewound_at = now
        return "past_gap"
    return "stale"
