"""Hostile values, one at a time, under ANSI mode (Spark 4's default, kept on): every cast,
split and index of the rebuild meets a value it cannot take as written, and the rebuild
must neither fail nor guess. Each record below sits alone in its own entity; the rebuild
must treat it exactly as the online projector does (its own code, :mod:`tests.spark.reference`):
refuse it with the projector's reason, or apply it and hold the same rows (timeline
summary, read-model rows, position).

Where each value bites: ``parse`` turns ``occurred_at`` into a time and the sequence into
an int; ``contract`` splits a decimal at its point and compares it with its bounds as
``decimal(38,10)`` (28 whole digits, where the native checks let texts of 30 characters
through); ``limits`` casts money to the column's scale and subtracts longs; ``twins`` casts
to the columns' types; ``summary`` tells whether a number is zero.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from pydantic import Field
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from readside import codec
from sagas.catalog import READ_MODELS
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.ids import derive_id, external_command_id
from sagas.messages import Envelope, Message, Summary
from sagas.projections.rows import summarize
from spark_projections import contract, models, pipeline, twins
from spark_projections.summary import render
from tests.spark import golden
from tests.spark.frames import place, records_frame
from tests.spark.history import Raw
from tests.spark.reference import Record, Reference, project

pytestmark = pytest.mark.spark

LONG_AMOUNT = "123456789012345678901234567890"
"""30 digits: a canonical decimal of the longest text the native checks let through, with
two more whole digits than ``decimal(38,10)`` holds."""


@dataclass(frozen=True)
class Hostile:
    name: str
    key: str
    text: str

    def raw(self) -> Raw:
        return self.key.encode(), self.text.encode()


def _event(entity: str, message: Message, sequence: int = 1) -> Envelope:
    return Envelope.wrap(
        message,
        message_id=derive_id(entity, str(sequence)),
        key=entity,
        occurred_at=golden.T0,
        saga_id=entity.split(":", 1)[1],
        causation_id=external_command_id(entity, "hostile"),
        entity_type=entity.split(":", 1)[0],
        sequence=sequence,
    )


def _order(name: str, price: str = "12.50", total: str = "25.00") -> Hostile:
    line = oc.OrderLine(product_id="p-1", quantity=2, unit_price=Decimal("12.50"))
    placed = oc.OrderPlaced(
        customer_id="c-1", lines=(line,), payment_method="card", total=Decimal("25.00")
    )
    text = _event(f"order:{name}", placed).encode().decode()
    assert '"unit_price":"12.50"' in text and '"total":"25.00"' in text
    text = text.replace('"unit_price":"12.50"', f'"unit_price":"{price}"')
    return Hostile(name, f"order:{name}", text.replace('"total":"25.00"', f'"total":"{total}"'))


def _edited(name: str, entity: str, message: Message, edit: Callable[[str], str]) -> Hostile:
    text = _event(entity, message).encode().decode()
    edited = edit(text)
    assert edited != text, name
    return Hostile(name, entity, edited)


def _time(name: str, when: str) -> Hostile:
    status = oc.OrderStatusChanged(status="PENDING")
    return _edited(
        name,
        f"order:{name}",
        status,
        lambda t: t.replace(f'"occurred_at":"{golden.T0:%Y-%m-%dT%H:%M:%S}.250000Z"', when),
    )


def _sequence(name: str, sequence: str) -> Hostile:
    status = oc.OrderStatusChanged(status="PENDING")
    return _edited(
        name, f"order:{name}", status, lambda t: t.replace('"sequence":1', f'"sequence":{sequence}')
    )


def _stock(name: str, on_hand: str, reserved: str) -> Hostile:
    fact = lc.CapacitySet(on_hand=5, reserved=1)
    return _edited(
        name,
        f"product:{name}",
        fact,
        lambda t: t.replace('"on_hand":5', f'"on_hand":{on_hand}').replace(
            '"reserved":1', f'"reserved":{reserved}'
        ),
    )


def _payment(name: str, amount: str) -> Hostile:
    authorized = pc.Authorized(amount=Decimal("7.00"), method="card")
    return _edited(
        name,
        f"payment:{name}",
        authorized,
        lambda t: t.replace('"amount":"7.00"', f'"amount":"{amount}"'),
    )


HOSTILE: tuple[Hostile, ...] = (
    # occurred_at (parse: try_to_timestamp; to_timestamp fails the job under ANSI mode)
    _time("time-30-february", '"occurred_at":"2024-02-30T09:00:00Z"'),
    _time("time-hour-24", '"occurred_at":"2024-03-01T24:00:00Z"'),
    _time("time-month-13", '"occurred_at":"2024-13-01T09:00:00Z"'),
    _time("time-year-0", '"occurred_at":"0000-01-01T00:00:00Z"'),  # a time to Spark
    _time("time-year-1", '"occurred_at":"0001-01-01T00:00:00Z"'),
    _time("time-29-february-2023", '"occurred_at":"2023-02-29T09:00:00Z"'),
    _time("time-second-60", '"occurred_at":"2016-12-31T23:59:60Z"'),
    _time("time-a-word", '"occurred_at":"yesterday"'),
    _time("time-a-number", '"occurred_at":1709280000'),
    # decimals (contract: split and index; the bounds as decimal(38,10))
    _order("decimal-without-fraction", price="12", total="24"),
    _order("decimal-only-zero", price="0", total="0"),
    _order("decimal-30-digit-price", price=LONG_AMOUNT, total="25.00"),
    _order("decimal-28-whole-digits-and-fraction", price="1234567890123456789012345678.5"),
    _order("decimal-11-places", price="0.00000000001"),
    _order("decimal-a-word", price="twelve"),
    _order("decimal-two-points", price="1.2.3"),
    _order("decimal-only-a-point", price="."),
    # money into its column (limits: NUMERIC(14,2), rounded half up like codec.money)
    _order("money-30-digit-total", total=LONG_AMOUNT),
    _order("money-rounds-up-past-the-column", total="999999999999.995"),
    _order("money-rounds-down-into-the-column", total="999999999999.994"),
    _order("money-with-an-exponent", total="1E+3"),
    _order("money-a-word", total="lots"),
    # a 30-digit amount no column holds: the projector applies it, prints it as written
    _payment("amount-30-digits", LONG_AMOUNT),
    _payment("amount-30-digits-negative", "-12345678901234567890123456789"),
    # the sequence (parse: an int; limits: 1..2**31-1)
    _sequence("sequence-past-int", str(2**31)),
    _sequence("sequence-past-long", str(2**64)),
    _sequence("sequence-negative", "-1"),
    # longs into INTEGER columns, and their difference (limits, twins)
    _stock("integer-past-int", on_hand=str(2**32), reserved="1"),
    _stock("integer-past-long", on_hand=str(2**64), reserved="1"),
    _stock("difference-past-int", on_hand="2147483647", reserved="-1"),
    _stock("difference-of-longs", on_hand="999999999999999999", reserved="-999999999999999999"),
)


@dataclass(frozen=True)
class Rebuilt:
    """What the rebuild made of the hostile records, collected once."""

    rejected: set[tuple[int, int, str]]
    timeline: dict[str, list[tuple[Any, ...]]]
    rows: dict[str, dict[str, list[tuple[Any, ...]]]]
    positions: dict[str, int]


@pytest.fixture(scope="module")
def records() -> list[Record]:
    return place(h.raw() for h in HOSTILE)


@pytest.fixture(scope="module")
def reference(records: list[Record]) -> Reference:
    return project(records)


@pytest.fixture(scope="module")
def rebuilt(spark: SparkSession, records: list[Record]) -> Rebuilt:
    stage = pipeline.staged(records_frame(spark, records))
    gated = stage.gated.cache()
    rejected = {
        (r["partition"], r["offset"], r["reason"])
        for r in stage.rejects.select("partition", "offset", "reason").collect()
    }
    timeline: dict[str, list[tuple[Any, ...]]] = {}
    for row in _timeless(models.saga_timeline(gated)).collect():
        timeline.setdefault(row["entity_key"], []).append(tuple(row))
    rows: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
    for model in READ_MODELS:
        for row in _timeless(twins.rows(gated, model)).collect():
            entity = f"{model.entity_type}:{row[model.key]}"
            rows.setdefault(model.name, {}).setdefault(entity, []).append(tuple(row))
    positions = {
        r["entity_key"]: r["last_sequence"] for r in models.entity_positions(gated).collect()
    }
    gated.unpersist()
    return Rebuilt(rejected, timeline, rows, positions)


def _timeless(frame: DataFrame) -> DataFrame:
    """``frame`` with its times as text (pyspark cannot collect a time in year 1)."""
    return frame.select(
        *[
            F.date_format(f.name, TIME_TEXT).alias(f.name)
            if isinstance(f.dataType, TimestampType)
            else F.col(f.name)
            for f in frame.schema.fields
        ]
    )


TIME_TEXT = "yyyy-MM-dd HH:mm:ss.SSSSSS"


def _stored(values: Any) -> tuple[Any, ...]:
    """Values as the projector's codec stores them, times as :data:`TIME_TEXT` in UTC."""
    return tuple(
        codec.utc(v).replace(tzinfo=None).isoformat(" ", "microseconds")
        if isinstance(v, datetime)
        else v
        for v in values
    )


def _expected_rows(reference: Reference) -> Iterator[tuple[str, str, tuple[Any, ...]]]:
    for model in READ_MODELS:
        columns = [c.name for c in model.columns]
        for row in reference.rows[model.name]:
            values = codec.row_values(model, row)
            entity = f"{model.entity_type}:{values[model.key]}"
            yield model.name, entity, _stored(values[c] for c in columns)


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_the_rebuild_treats_a_hostile_value_as_the_projector_does(
    hostile: Hostile, records: list[Record], reference: Reference, rebuilt: Rebuilt
) -> None:
    (where,) = [(p, o) for p, o, k, _ in records if k == hostile.key.encode()]
    refused = {r for r in reference.rejected if r[:2] == where}
    assert {r for r in rebuilt.rejected if r[:2] == where} == refused
    timeline = [
        _stored(codec.timeline_values(e).values())
        for e in reference.timeline
        if e.entity_key == hostile.key
    ]
    assert rebuilt.timeline.get(hostile.key, []) == timeline
    for name, entity, row in _expected_rows(reference):
        if entity == hostile.key:
            assert rebuilt.rows.get(name, {}).get(entity) == [row], name
    for name, by_entity in rebuilt.rows.items():
        if hostile.key in by_entity:
            assert any(n == name and e == hostile.key for n, e, _ in _expected_rows(reference))
    assert rebuilt.positions.get(hostile.key) == reference.positions.get(hostile.key)


def test_the_hostile_values_are_refused_and_applied_both(reference: Reference) -> None:
    """The list proves something both ways: some values the projector refuses, some it
    applies (and then the rebuild's rows are compared)."""
    refused = {(p, o) for p, o, _ in reference.rejected}
    applied = {e.key for e in reference.applied}
    assert len(refused) >= 10 and len(applied) >= 5
    assert "payment:amount-30-digits" in applied
    assert "order:decimal-without-fraction" in applied


# --- the checks themselves, on hostile texts --------------------------------------------


class _Bounded(Message):
    """Not registered (no TYPE): a decimal with bounds other than zero, which no contract
    has today, where rounding to 10 places would decide."""

    amount: Decimal = Field(ge=Decimal("-100"), le=Decimal("100"))


class _Tip(Message):
    """Not registered: a summary whose ``when`` is a decimal (none is today)."""

    SUMMARY = Summary("no tip", when="tip", then="tip of {tip}")
    tip: Decimal | None = None


BOUNDED_TEXTS = (
    "100",
    "100.0000000000",
    "100.00000000001",
    "-100.00000000001",
    "99.999999999999999",
    "0.00000000001",
    LONG_AMOUNT,
    "-" + LONG_AMOUNT[1:],
    "12",
    "1.5",
)


def _texts(spark: SparkSession, texts: tuple[str, ...]) -> DataFrame:
    return spark.createDataFrame(
        [(t,) for t in texts], StructType([StructField("v", StringType())])
    )


def test_a_bounded_decimal_is_vouched_for_only_where_pydantic_takes_it_as_written(
    spark: SparkSession,
) -> None:
    (spec,) = contract.payload_contract(_Bounded).fields
    checked = _texts(spark, BOUNDED_TEXTS).select(
        "v", F.coalesce(contract.value_ok(F.col("v"), spec), F.lit(False)).alias("ok")
    )
    native = {r["v"]: r["ok"] for r in checked.collect()}
    for text in BOUNDED_TEXTS:
        try:
            taken = str(_Bounded.model_validate({"amount": text}).amount) == text
        except ValueError:
            taken = False
        assert not native[text] or taken, text  # sound: never vouched for what pydantic refuses
    assert native["100"] and native["12"] and native["1.5"]
    assert not native["100.00000000001"] and not native[LONG_AMOUNT]


TIP_TEXTS = ("0", "0.00", "-0", "0E-7", "1E-400", "0.01", "-0.000001", "12")


def test_a_decimal_summary_condition_reads_zero_as_python_does(spark: SparkSession) -> None:
    payload = F.struct(F.col("v").alias("tip"))
    lines = _texts(spark, TIP_TEXTS).select("v", render(_Tip, payload).alias("line")).collect()
    rendered = {r["v"]: r["line"] for r in lines}
    for text in TIP_TEXTS:
        assert rendered[text] == summarize(_Tip(tip=Decimal(text))), text


def test_the_hostile_records_are_json_the_projector_reads() -> None:
    """Each hostile record is one edit of a valid event: the value, not the framing."""
    for hostile in HOSTILE:
        assert isinstance(json.loads(hostile.text), dict), hostile.name
