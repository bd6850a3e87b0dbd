"""Read Debezium change events of the legacy school tables, as untrusted input.

A record value from a ``legacy.school.*`` topic is one of: a change envelope (``before``,
``after``, ``op``, ``ts_ms``, ``source``), with or without the JSON converter's
``{"schema": ..., "payload": ...}`` wrapper (``schemas.enable`` true or false); a tombstone
(no value) that follows a delete for log compaction; or anything else, which is garbage.
:func:`decode_change` turns the first into a :class:`RowChanged`, the second into ``None``
(ignored), and raises :class:`ContractError` with a bounded reason for the third (it goes
to the dead-letter topic). Records of the ``<prefix>.transaction`` topic (transaction
metadata) are read by :func:`decode_transaction_marker`.

Only the fields the correlator needs are read; the rest of Debezium's envelope
(``ts_us``, ``source.sequence``, the schema) may change between versions without harm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from sagas.contracts.legacy import ROW_MODELS, SCHEMA, RowChanged
from sagas.messages import _describe
from sagas.untrusted import ContractError, bounded, is_digits, parse_object

SNAPSHOT_MARKS = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last"}
)
"""``source.snapshot`` of a row read by a snapshot; ``"false"`` (or none) for a change.
``"incremental"`` (an ad hoc incremental snapshot) also reads rows: see :func:`_is_snapshot`."""
_OPS_WITH = {"c": ("after",), "r": ("after",), "u": ("before", "after"), "d": ("before",)}
"""The row images each operation must carry (``REPLICA IDENTITY FULL`` gives updates and
deletes their ``before``)."""


def unwrap(data: dict[str, Any]) -> dict[str, Any]:
    """The payload of a ``schemas.enable=true`` record, or the record itself."""
    if set(data) == {"schema", "payload"}:
        payload = data["payload"]
        if not isinstance(payload, dict):
            raise ContractError("Debezium record: `payload` is not an object")
        return payload
    return data


def decode_change(raw: bytes | str | None) -> RowChanged | None:
    """The row change a Debezium record holds; ``None`` for a tombstone."""
    if raw is None or len(raw) == 0:
        return None
    payload = unwrap(parse_object(raw))
    source = payload.get("source")
    if not isinstance(source, dict):
        raise ContractError("Debezium record: no `source` object")
    op = payload.get("op")
    if op not in _OPS_WITH:
        raise ContractError(f"Debezium record: unknown op {bounded(repr(op), 40)}")
    if source.get("schema") != SCHEMA:
        raise ContractError(
            f"Debezium record: schema {bounded(repr(source.get('schema')), 60)} is not {SCHEMA!r}"
        )
    table = source.get("table")
    if table not in ROW_MODELS:
        raise ContractError(f"Debezium record: unknown table {bounded(repr(table), 60)}")
    for image in ("before", "after"):
        present = payload.get(image) is not None
        if present != (image in _OPS_WITH[op]):
            raise ContractError(
                f"Debezium record: op {op!r} on {table} with{'' if present else 'out'} `{image}`"
            )
    lsn, ts_ms = source.get("lsn"), source.get("ts_ms")
    row = payload.get("after") if op != "d" else payload.get("before")
    key = _primary_key(table, row)
    try:
        return RowChanged.model_validate(
            {
                "table": table,
                "op": op,
                "before": _row(table, payload.get("before")),
                "after": _row(table, payload.get("after")),
                "tx_id": source.get("txId"),
                "lsn": lsn,
                "ts_ms": ts_ms,
                "snapshot": _is_snapshot(source.get("snapshot"), op),
                "position": f"{lsn}/{table}/{op}/{key}",
            }
        )
    except ValidationError as exc:
        raise ContractError(f"Debezium record: {_describe(exc)}") from None


def _row(table: str, image: Any) -> Any:
    if image is None:
        return None
    try:
        return ROW_MODELS[table].model_validate(image)
    except ValidationError as exc:
        raise ContractError(f"Debezium record: {table} row: {_describe(exc)}") from None


def _primary_key(table: str, row: Any) -> str:
    if not isinstance(row, dict):
        raise ContractError(f"Debezium record: the {table} row is not an object")
    values = [row.get(p) for p in ROW_MODELS[table].KEY]
    if not all(isinstance(v, str) and v for v in values):
        raise ContractError(f"Debezium record: the {table} row has no primary key")
    return "/".join(str(v) for v in values)


def _is_snapshot(mark: Any, op: str) -> bool:
    if op == "r":
        return True
    if mark is None or mark == "false":
        return False
    if mark in SNAPSHOT_MARKS or mark == "incremental":
        return True
    raise ContractError(f"Debezium record: unknown source.snapshot {bounded(repr(mark), 40)}")


@dataclass(frozen=True)
class TransactionMarker:
    """A BEGIN or END record of the transaction metadata topic. END says how many change
    events the transaction produced in each table, so a correlator can tell that it has
    seen them all without waiting for its window."""

    status: Literal["BEGIN", "END"]
    tx_id: int
    event_count: int | None
    """END only: change events of the transaction, all tables together."""
    per_table: tuple[tuple[str, int], ...]
    """END only: (``schema.table``, events), as Debezium lists them."""


def decode_transaction_marker(raw: bytes | str | None) -> TransactionMarker:
    """A record of ``<prefix>.transaction``; raises :class:`ContractError` for anything else."""
    data = unwrap(parse_object(raw))
    status, ident = data.get("status"), data.get("id")
    if status not in ("BEGIN", "END"):
        raise ContractError(f"transaction marker: unknown status {bounded(repr(status), 40)}")
    # Debezium 3.1 writes the id as "<txId>:<lsn>"; older versions as "<txId>".
    tx_text = ident.split(":", 1)[0] if isinstance(ident, str) else ""
    if not is_digits(tx_text) or len(tx_text) > 19:
        raise ContractError(f"transaction marker: bad id {bounded(repr(ident), 60)}")
    if status == "BEGIN":
        return TransactionMarker("BEGIN", int(tx_text), None, ())
    count, collections = data.get("event_count"), data.get("data_collections")
    if not isinstance(count, int) or count < 0 or not isinstance(collections, list):
        raise ContractError("transaction marker: END without event_count/data_collections")
    per_table: list[tuple[str, int]] = []
    for item in collections:
        name = item.get("data_collection") if isinstance(item, dict) else None
        events = item.get("event_count") if isinstance(item, dict) else None
        if not isinstance(name, str) or not isinstance(events, int) or events < 0:
            raise ContractError("transaction marker: bad data_collections entry")
        per_table.append((bounded(name, 100), events))
    return TransactionMarker("END", int(tx_text), count, tuple(per_table))
