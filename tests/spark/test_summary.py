"""The native summary renderer against ``Summary.render`` on templates no contract uses yet:
every field kind printed and counted, and ``when`` on a boolean, an integer, a decimal and
an optional text, set and unset in every way Python's truth test tells apart (None, False,
0, 0.00, an empty text). The contracts here have no ``TYPE``, so they are not registered
and nothing else sees them; the registered ones are covered by ``test_parse``."""

from __future__ import annotations

import itertools
from decimal import Decimal
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from sagas.messages import Message, Summary
from spark_projections import contract
from spark_projections.summary import NoNativeSummary, render
from tests.spark.compare import assertDataFrameEqual

pytestmark = pytest.mark.spark

TEXT = "{count} x {amount} for {note} ({name:count} chars), {items:count} item(s), flag {flag}"


class Item(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    sku: str


class Sampled(Message):
    count: int
    amount: Decimal
    flag: bool | None
    note: str | None
    name: str
    items: tuple[Item, ...]


class ByCount(Sampled):
    SUMMARY: ClassVar[Summary | None] = Summary(TEXT, when="count", then="counted: " + TEXT)


class ByAmount(Sampled):
    SUMMARY: ClassVar[Summary | None] = Summary(TEXT, when="amount", then="{amount} due")


class ByFlag(Sampled):
    SUMMARY: ClassVar[Summary | None] = Summary(TEXT, when="flag", then="flagged {name}")


class ByNote(Sampled):
    SUMMARY: ClassVar[Summary | None] = Summary(TEXT, when="note", then="note: {note}")


def _samples(model: type[Sampled]) -> list[Sampled]:
    values = itertools.product(
        (0, 2), (Decimal("0.00"), Decimal("0"), Decimal("12.50")), (None, False, True)
    )
    notes = itertools.cycle((None, "", "hi"))
    return [
        model(
            count=count,
            amount=amount,
            flag=flag,
            note=next(notes),
            name="abc",
            items=tuple(Item(sku=f"s{i}") for i in range(count)),
        )
        for count, amount, flag in values
    ]


@pytest.mark.parametrize("model", [ByCount, ByAmount, ByFlag, ByNote])
def test_a_template_renders_natively_as_summary_render_does(
    spark: SparkSession, model: type[Sampled]
) -> None:
    fields = contract.payload_contract(model).fields
    schema = StructType(
        [
            StructField("i", StringType()),
            StructField("p", StructType([StructField(f.name, f.dtype) for f in fields])),
        ]
    )
    samples = _samples(model)
    rows = [(str(i), m.model_dump(mode="json")) for i, m in enumerate(samples)]
    frame = spark.createDataFrame(rows, schema)
    actual = frame.select("i", render(model, F.col("p")).alias("summary"))
    assert model.SUMMARY is not None
    lines = [(str(i), model.SUMMARY.render(m)) for i, m in enumerate(samples)]
    when = model.SUMMARY.when
    assert when is not None
    taken = {getattr(m, when) not in (None, False) for m in samples}
    assert taken == {True, False}, "the samples must take both branches"
    assertDataFrameEqual(actual, spark.createDataFrame(lines, actual.schema))


def test_a_field_spark_cannot_print_as_python_does_is_refused() -> None:
    class Listed(Sampled):
        SUMMARY: ClassVar[Summary | None] = Summary("items {items}")

    with pytest.raises(NoNativeSummary, match="cannot print"):
        render(Listed, F.col("p"))
