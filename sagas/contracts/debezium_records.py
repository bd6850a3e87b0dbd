"""The records of Debezium's topics, as the PostgreSQL connector writes them: not envelopes.

These models describe, for the AsyncAPI document (``runtime.topics.external_topics``), the
values Kafka Connect writes to ``<prefix>.school.<table>`` and ``<prefix>.transaction``.
They are documentation of another system's output, not the decoder: the worker reads those
records as untrusted input with :mod:`sagas.debezium` (which accepts fields this model does
not name, and either converter shape). ``tests/unit/test_debezium_records.py`` checks the
real records captured from the pipeline (``tests/fixtures/debezium/``) against them.

With the JSON converter's ``schemas.enable=true`` (the local connector's setting) each value
is ``{"schema": {...}, "payload": <the model below>}``; with ``false``, the model itself. A
tombstone (null value) follows each delete.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from sagas.contracts.legacy import ROW_MODELS, SCHEMA, Operation, Row, Table


class _Open(BaseModel):
    # Debezium adds fields between versions (ts_us, ts_ns...): a reader must allow them.
    model_config = ConfigDict(frozen=True, extra="allow")


class DebeziumSource(_Open):
    """Where the change comes from in the legacy database's write-ahead log."""

    connector: Literal["postgresql"]
    name: str = Field(description="The connector's topic.prefix")
    db: str
    schema_: str = Field(alias="schema")
    table: Table
    txId: int | None = Field(description="The source transaction: the correlation key")
    lsn: int | None = Field(
        description="Log sequence number: with table, op and key, the dedupe position"
    )
    snapshot: str | None = Field(None, description="true, first, last, false... (op r rows)")
    ts_ms: int


class DebeziumTransactionRef(_Open):
    id: str = Field(description='"<txId>:<lsn>"')
    total_order: int
    data_collection_order: int


class _Change(_Open):
    op: Operation
    ts_ms: int
    source: DebeziumSource
    transaction: DebeziumTransactionRef | None = Field(
        None, description="Present with provide.transaction.metadata=true (null for snapshot rows)"
    )


def _change_model(table: str, row: type[Row]) -> type[_Change]:
    """The change record of ``table``, whose rows ``row`` describes (``StudentRow`` ->
    ``StudentChange``)."""
    key = ", ".join(f'"{c}"' for c in row.KEY)
    doc = (
        f"A change of a ``{SCHEMA}.{table}`` row (``<prefix>.{SCHEMA}.{table}``; key:"
        f" ``{{{key}}}``)."
        " A primary-key update is a delete, a tombstone and a create with one LSN."
    )
    name = row.__name__.removesuffix("Row") + "Change"
    nullable: Any = row | None  # a type made at run time, which mypy cannot follow
    model = create_model(
        name, __base__=_Change, __doc__=doc, before=(nullable, ...), after=(nullable, ...)
    )
    model.__module__ = __name__
    return model


BY_TABLE: dict[str, type[_Change]] = {t: _change_model(t, r) for t, r in ROW_MODELS.items()}
"""One change record per followed table: legacy.ROW_MODELS is the registry."""


class DebeziumTransaction(_Open):
    """A source transaction's BEGIN or END marker (``<prefix>.transaction``); END carries how
    many change events the transaction produced, which closes it in the correlator."""

    status: Literal["BEGIN", "END"]
    id: str = Field(description='"<txId>:<lsn>"')
    event_count: int | None
    data_collections: list[dict[str, object]] | None
    ts_ms: int
