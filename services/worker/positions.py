"""Where each input partition resumes: the worker's own record of what it has processed.

Faust's committed offset is only a hint. Faust acks a batch's events in a ``finally`` (so a
batch whose handler raised counts as done), and its offset bookkeeping across rebalances
and read-offset gaps has a record of moving past records nobody processed. So the runner
keeps, per input partition, the next offset it must process, and stores it in the
process's table *after* the batch's states (same table partition, same changelog
partition, so whoever recovers the position also recovers every state it covers).

:class:`InputPositions` decides, record by record, what to do with what the consumer
delivers:

- the expected offset: process it;
- below it: already processed (a replay after a crash or a seek), skip it;
- above it: a gap. Do not process it; ask for a seek back to the expected offset, and
  skip what the consumer had already fetched past the gap (offsets keep rising). The first
  record that does not continue that rising run comes from the seek: the expected offset
  itself, or, when the offsets in between do not exist (retention deleted them, or they
  were transaction markers), the first offset that does, which is then processed.

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


@dataclass
class _Partition:
    expected: int | None
    """The next offset to process; None: nothing processed here yet, take what comes."""
    skipping_above: int | None = None
    """While rewinding: the highest offset seen past the gap (records above it are stale)."""


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
    missing: list[tuple[str, int, int, int]]
    """(topic, partition, first, last): offsets found not to exist, skipped over."""
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

    def plan(self, records: Iterable[Positioned]) -> Plan:
        after: dict[tuple[str, int], _Partition] = {}
        verdicts: list[Verdict] = []
        rewinds: list[Rewind] = []
        missing: list[tuple[str, int, int, int]] = []
        for record in records:
            tp = (record.topic, record.partition)
            if tp not in after:
                after[tp] = self._current(tp)
            part = after[tp]
            verdict, gap = _admit(part, record.offset)
            verdicts.append(verdict)
            if gap is None:
                continue
            if verdict == "past_gap":
                rewinds.append(Rewind(record.topic, record.partition, gap))
            else:
                missing.append((record.topic, record.partition, gap, record.offset - 1))
        return Plan(verdicts, rewinds, missing, after)

    def commit(self, plan: Plan) -> None:
        self._partitions.update(plan._after)

    def _current(self, tp: tuple[str, int]) -> _Partition:
        known = self._partitions.get(tp)
        if known is None:
            return _Partition(self._load(*tp))
        return _Partition(known.expected, known.skipping_above)


def _admit(part: _Partition, offset: int) -> tuple[Verdict, int | None]:
    """Update ``part`` for one delivered offset. The int is the rewind target for
    ``past_gap``, or the first missing offset when a rewind found offsets absent."""
    if part.expected is None or offset == part.expected:
        part.expected, part.skipping_above = offset + 1, None
        return "process", None
    if offset < part.expected:
        return "replayed", None
    if part.skipping_above is None:  # a gap: go back for what is missing
        part.skipping_above = offset
        return "past_gap", part.expected
    if offset > part.skipping_above:  # still the run fetched before the seek
        part.skipping_above = offset
        return "stale", None
    # Not rising any more: this comes from the seek, and what lies before it does not exist.
    first_missing = part.expected
    part.expected, part.skipping_above = offset + 1, None
    return "process", first_missing
