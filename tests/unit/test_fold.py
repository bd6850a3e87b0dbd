"""The fold derived from a read model's columns (:mod:`sagas.projections.fold`): after every
event of any stream, the row it has built event by event is the row the declaration says
the whole stream makes (:func:`over_the_whole_stream`, declare.py's definition read
literally), for every kind of column value; and the declarations it cannot fold from the
row alone are refused when they are made."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sagas.contracts import ledger, orders
from sagas.machinery.frozen import checked_copy
from sagas.machinery.versions import FIRST
from sagas.messages import Envelope, Message
from sagas.projections.declare import (
    Column,
    Constant,
    Difference,
    EntityId,
    Integer,
    Latest,
    LatestSequence,
    LatestTime,
    LatestVersion,
    OrElse,
    ReadModel,
    Text,
    Timestamp,
    Value,
)
from sagas.projections.fold import UnreadableOperand
from sagas.projections.rows import Row

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = "seat:s-1"


def over_the_whole_stream(model: ReadModel[Any], events: list[Envelope]) -> dict[str, Any] | None:
    """The row the declaration says ``events`` (one entity's, in sequence order) make."""
    starts = [i for i, ev in enumerate(events) if isinstance(ev.message(), model.starts)]
    if not starts:
        return None
    since = events[starts[-1] :]

    def latest(of: type[Message] | None) -> Envelope | None:
        matching = [ev for ev in since if of is None or isinstance(ev.message(), of)]
        return matching[-1] if matching else None

    def value(declared: Value) -> Any:
        match declared:
            case EntityId():
                return since[0].key.split(":", 1)[1]
            case Latest(of=of, field=field):
                found = latest(of)
                return None if found is None else getattr(found.message(), field)
            case LatestTime(of=of):
                found = latest(of)
                return None if found is None else found.occurred_at
            case LatestSequence(of=of):
                found = latest(of)
                return None if found is None else found.sequence
            case LatestVersion():
                return since[-1].definition_version or FIRST
            case Difference(left=left, right=right):
                a, b = value(left), value(right)
                return None if a is None or b is None else a - b
            case OrElse(first=first, then=then):
                found = value(first)
                return value(then) if found is None else found
            case Constant(value=constant):
                return constant
        raise AssertionError(f"no meaning for {declared!r}")

    return {c.name: value(c.value) for c in model.columns}


class SeatRow(Row):
    seat_id: str
    seats: int | None
    held: int | None
    free: int | None
    refused_held: int | None
    free_at_refusal: int | None
    last_refusal: str | None
    release_reason: str | None
    last_release: str
    last_release_or_refusal: str | None
    opened_at: datetime | None
    updated_at: datetime | None
    refused_at: datetime | None
    last_sequence: int | None
    fact_sequence: int | None
    refusal_sequence: int | None
    kind: str


_FACT, _OPENED = ledger.LedgerFact, ledger.CapacitySet
_REFUSED, _RELEASED = ledger.ReservationRejected, ledger.Released


def _seat_columns(*more: Column) -> tuple[Column, ...]:
    return (
        Column("seat_id", Text(100), EntityId()),
        Column("seats", Integer(), Latest(_FACT, "on_hand")),
        Column("held", Integer(), Latest(_FACT, "reserved")),
        Column("free", Integer(), Difference(Latest(_FACT, "on_hand"), Latest(_FACT, "reserved"))),
        Column("refused_held", Integer(), Latest(_REFUSED, "reserved"), True),
        Column(
            "free_at_refusal",
            Integer(),
            Difference(Latest(_FACT, "on_hand"), Latest(_REFUSED, "reserved")),
            True,
        ),
        Column("last_refusal", Text(), Latest(_REFUSED, "reason"), True),
        Column("release_reason", Text(), Latest(_RELEASED, "reason"), True),
        Column("last_release", Text(), OrElse(Latest(_RELEASED, "reason"), Constant("none"))),
        Column(
            "last_release_or_refusal",
            Text(),
            OrElse(Latest(_RELEASED, "reason"), Latest(_REFUSED, "reason")),
            True,
        ),
        Column("opened_at", Timestamp(), LatestTime(_OPENED)),
        Column("updated_at", Timestamp(), LatestTime(_FACT)),
        Column("refused_at", Timestamp(), LatestTime(_REFUSED), True),
        Column("last_sequence", Integer(), LatestSequence()),
        Column("fact_sequence", Integer(), LatestSequence(_FACT)),
        Column("refusal_sequence", Integer(), LatestSequence(_REFUSED), True),
        *more,
    )


SEATS: ReadModel[SeatRow] = ReadModel(
    name="seats",
    entity_type="seat",
    row_type=SeatRow,
    key="seat_id",
    starts=_OPENED,
    columns=_seat_columns(Column("kind", Text(10), Constant("seat"))),
)
"""Every kind of value, each over sources the start event does not always set."""


def _random_message(rng: random.Random) -> Message:
    on_hand, reserved = rng.randint(0, 9), rng.randint(0, 9)
    choices: list[Message] = [
        ledger.CapacitySet(on_hand=on_hand, reserved=reserved),
        ledger.Reserved(
            on_hand=on_hand, reserved=reserved, reservation_id="r", quantity=1, expires_at="t"
        ),
        ledger.ReservationRejected(
            on_hand=on_hand, reserved=reserved, reservation_id="r", quantity=1, reason="full"
        ),
        ledger.Confirmed(on_hand=on_hand, reserved=reserved, reservation_id="r", quantity=1),
        ledger.Released(
            on_hand=on_hand,
            reserved=reserved,
            reservation_id="r",
            quantity=1,
            reason=rng.choice(["cancelled", "expired"]),
        ),
        orders.OrderStatusChanged(status="CONFIRMED"),  # a type no column reads
    ]
    return rng.choice(choices)


def _stream(seed: int, length: int) -> list[Envelope]:
    rng = random.Random(seed)
    return [
        Envelope.wrap(
            _random_message(rng),
            message_id=f"{KEY}#{n}",
            key=KEY,
            occurred_at=T0 + timedelta(seconds=n),
            entity_type="seat",
            sequence=n,
        )
        for n in range(1, length + 1)
    ]


@pytest.mark.parametrize("seed", range(40))
def test_each_value_folded_event_by_event_is_the_value_over_the_whole_stream(seed: int) -> None:
    events = _stream(seed, 12)
    row: SeatRow | None = None
    for upto, event in enumerate(events, start=1):
        row = SEATS.fold(row, event)
        expected = over_the_whole_stream(SEATS, events[:upto])
        assert (None if row is None else dict(row)) == expected, f"after event {upto}"


def test_the_streams_cover_a_start_late_restarts_and_every_source_empty_and_set() -> None:
    """What the property above ranges over is worth checking: no row before a start, a
    restart, and each nullable column both null and set in some row."""
    rows = []
    restarts = 0
    for seed in range(40):
        events = _stream(seed, 12)
        rows += [over_the_whole_stream(SEATS, events[:n]) for n in range(1, 13)]
        restarts += sum(isinstance(ev.message(), _OPENED) for ev in events) >= 2
    assert None in rows and restarts > 0
    whole = [r for r in rows if r is not None]
    for name in ("refused_held", "free_at_refusal", "last_release_or_refusal", "refused_at"):
        assert {r[name] is None for r in whole} == {True, False}, name
    assert {r["last_release"] for r in whole} >= {"none", "cancelled"}


class VersionedSeatRow(SeatRow):
    version: int


VERSIONED_SEATS: ReadModel[VersionedSeatRow] = ReadModel(
    name="versioned_seats",
    entity_type="seat",
    row_type=VersionedSeatRow,
    key="seat_id",
    starts=_OPENED,
    columns=_seat_columns(
        Column("kind", Text(10), Constant("seat")), Column("version", Integer(), LatestVersion())
    ),
)
"""The seats with the version of the definition that published the latest event."""


def _versioned_stream(seed: int, length: int) -> list[Envelope]:
    """A stream whose events carry no version (version 1) or a version, at random."""
    rng = random.Random(seed)
    return [
        checked_copy(e, {"definition_version": rng.choice([None, None, 2, 3])})
        for e in _stream(seed, length)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_the_version_folded_event_by_event_is_the_latest_event_s_and_1_without_one(
    seed: int,
) -> None:
    events = _versioned_stream(seed, 12)
    row: VersionedSeatRow | None = None
    versions = set()
    for upto, event in enumerate(events, start=1):
        row = VERSIONED_SEATS.fold(row, event)
        expected = over_the_whole_stream(VERSIONED_SEATS, events[:upto])
        assert (None if row is None else dict(row)) == expected, f"after event {upto}"
        if row is not None:
            assert row.version == (event.definition_version or FIRST)  # every event moves it
            versions.add(row.version)
    assert versions <= {1, 2, 3}


def test_the_versioned_streams_show_every_version() -> None:
    rows = [
        over_the_whole_stream(VERSIONED_SEATS, _versioned_stream(seed, 12)[:n])
        for seed in range(20)
        for n in range(1, 13)
    ]
    assert {r["version"] for r in rows if r is not None} == {1, 2, 3}


def test_a_restart_forgets_what_came_before_it() -> None:
    def event(message: Message, n: int) -> Envelope:
        return Envelope.wrap(
            message, message_id=f"m{n}", key=KEY, occurred_at=T0, entity_type="seat", sequence=n
        )

    rejected = ledger.ReservationRejected(
        on_hand=5, reserved=1, reservation_id="r", quantity=1, reason="full"
    )
    row = SEATS.fold(None, event(rejected, 1))
    assert row is None  # no start yet
    row = SEATS.fold(row, event(ledger.CapacitySet(on_hand=5, reserved=0), 2))
    row = SEATS.fold(row, event(rejected, 3))
    assert row is not None and (row.last_refusal, row.free_at_refusal) == ("full", 4)
    row = SEATS.fold(row, event(ledger.CapacitySet(on_hand=6, reserved=2), 4))
    assert row is not None
    assert (row.last_refusal, row.free_at_refusal, row.free, row.last_release) == (
        None,
        None,
        4,
        "none",
    )


class Pair(Row):
    pair_id: str
    on_hand: int | None
    difference: int | None
    either: str | None


def _pair(column: str, value: Value) -> ReadModel[Pair]:
    declared: dict[str, Value] = {
        "difference": Difference(Latest(_OPENED, "on_hand"), Latest(_OPENED, "reserved")),
        "either": OrElse(Latest(_RELEASED, "reason"), Constant("none")),
    }
    declared[column] = value
    return ReadModel(
        name="pairs",
        entity_type="pair",
        row_type=Pair,
        key="pair_id",
        starts=_OPENED,
        columns=(
            Column("pair_id", Text(10), EntityId()),
            Column("on_hand", Integer(), Latest(_FACT, "on_hand"), True),
            Column("difference", Integer(), declared["difference"], True),
            Column("either", Text(), declared["either"], True),
        ),
    )


def test_an_operand_the_row_does_not_hold_is_refused_when_declared() -> None:
    """Between events the projector keeps only the row: a Difference whose side changes
    needs the other side's value, an OrElse whose ``then`` changes needs to know whether
    ``first`` is null, and one whose ``first`` may become null needs ``then``. A value
    that changes only with the start needs nothing (``_pair``'s defaults)."""
    with pytest.raises(UnreadableOperand, match=r"pairs, column difference: its left side"):
        _pair("difference", Difference(Latest(_FACT, "on_hand"), Latest(_OPENED, "reserved")))
    with pytest.raises(UnreadableOperand, match="its `then` changes after the start"):
        _pair("difference", OrElse(Latest(_REFUSED, "reserved"), Latest(_FACT, "on_hand")))
    with pytest.raises(UnreadableOperand, match="its `first` may change to null"):
        # A status change's reason is often null, and the start's count is no column.
        reasons = OrElse(Latest(orders.OrderStatusChanged, "reason"), Latest(_OPENED, "reserved"))
        _pair("either", reasons)
    # A release's reason is never null: once one is set, ``then`` is not needed.
    _pair("either", OrElse(Latest(_RELEASED, "reason"), Latest(_OPENED, "reserved")))
