"""What the worker's Debezium ingest edge sends for one Debezium record (pure).

A change record becomes a ``legacy.RowChanged`` envelope keyed by its correlation key
(:func:`~sagas.definitions.legacy_correlator.correlation_key`), with the id
``derive_id("debezium", position)``: Debezium redelivers changes after a connector restart,
and the copy gets the very id of the original, which the correlator's machinery drops (and
its state's positions too, beyond the machinery's seen window). A transaction's END record
becomes a ``legacy.TransactionEnded`` for the same key, with an id derived from the
transaction. A tombstone and a BEGIN record send nothing (``None``); anything unreadable
raises :class:`ContractError` with the reason (the edge dead-letters the record).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import ValidationError

from sagas.contracts.legacy import ROW_MODELS, SCHEMA, TransactionEnded
from sagas.debezium import decode_change, decode_transaction_marker
from sagas.definitions.legacy_correlator import correlation_key
from sagas.ids import derive_id
from sagas.messages import Envelope, _describe
from sagas.untrusted import ContractError


def change_envelope(raw: bytes | None) -> Envelope | None:
    """The correlator's input for a record of a ``<prefix>.school.<table>`` topic."""
    change = decode_change(raw)
    if change is None:
        return None  # a tombstone: log compaction's, the delete before it carried the row
    try:
        occurred_at = datetime.fromtimestamp(change.ts_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        raise ContractError(f"Debezium record: ts_ms {change.ts_ms} is no time") from None
    try:
        return Envelope.wrap(
            change,
            message_id=derive_id("debezium", change.position),
            key=correlation_key(change),
            occurred_at=occurred_at,
        )
    except ValidationError as exc:  # a key the envelope cannot carry (a huge primary key)
        raise ContractError(f"Debezium record: {_describe(exc)}") from None


def marker_envelope(raw: bytes | None, now: datetime) -> Envelope | None:
    """The correlator's input for a record of the ``<prefix>.transaction`` topic."""
    marker = decode_transaction_marker(raw)
    if marker.status != "END" or marker.event_count is None:
        return None  # BEGIN: the rows say a transaction started well enough
    count = followed_events(marker.per_table, marker.event_count)
    if count == 0:
        return None  # it changed none of the tables the correlator reads
    ended = TransactionEnded(tx_id=marker.tx_id, event_count=count)
    return Envelope.wrap(
        ended,
        message_id=derive_id("debezium", f"transaction/{marker.tx_id}/END"),
        key=f"tx:{marker.tx_id}",  # correlation_key() of every row of the transaction
        occurred_at=now,
    )


FOLLOWED = frozenset(f"{SCHEMA}.{table}" for table in ROW_MODELS)
"""The tables whose change topics the correlator reads, as Debezium names them in an END
record's ``data_collections``."""


def followed_events(per_table: tuple[tuple[str, int], ...], total: int) -> int:
    """The change events of an END record's transaction that the correlator will receive:
    those of the tables it reads. A connector capturing more tables counts their rows in the
    total, which would hold the transaction open for rows that never come. Without a
    per-table list, the total."""
    if not per_table:
        return total
    return sum(events for name, events in per_table if name in FOLLOWED)
