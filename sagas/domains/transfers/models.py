"""The transfers read models: one row per transfer, and one per account."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from sagas.domains.transfers import contracts as t
from sagas.machinery.versions import FIRST
from sagas.projections.declare import (
    SAGA_VERSION,
    Column,
    Constant,
    EntityId,
    Index,
    Integer,
    Latest,
    LatestSequence,
    LatestTime,
    Money,
    OrElse,
    ReadModel,
    Text,
    Timestamp,
)
from sagas.projections.rows import Row


class TransferRow(Row):
    transfer_id: str
    source: str
    destination: str
    amount: Decimal
    status: str
    reason: str | None
    created_at: datetime
    updated_at: datetime
    last_sequence: int
    version: int = FIRST


class AccountRow(Row):
    account_id: str
    balance: Decimal
    on_hold: Decimal
    status: str
    updated_at: datetime
    last_sequence: int


_REQUESTED, _CHANGED, _FACT = t.TransferRequested, t.TransferStatusChanged, t.AccountFact

TRANSFERS: ReadModel[TransferRow] = ReadModel(
    name="transfers",
    entity_type="transfer",
    row_type=TransferRow,
    key="transfer_id",
    starts=_REQUESTED,
    columns=(
        Column("transfer_id", Text(64), EntityId()),
        Column("source", Text(64), Latest(_REQUESTED, "source")),
        Column("destination", Text(64), Latest(_REQUESTED, "destination")),
        Column("amount", Money(14, 2), Latest(_REQUESTED, "amount")),
        Column("status", Text(20), OrElse(Latest(_CHANGED, "status"), Constant("PENDING"))),
        Column("reason", Text(), Latest(_CHANGED, "reason"), nullable=True),
        Column("created_at", Timestamp(), LatestTime(_REQUESTED)),
        Column("updated_at", Timestamp(), OrElse(LatestTime(_CHANGED), LatestTime(_REQUESTED))),
        Column("last_sequence", Integer(), LatestSequence()),
        SAGA_VERSION,
    ),
    indexes=(
        # The saga list (console, GET /sagas): newest change first, by status too.
        Index("ix_transfers_updated", ("updated_at", "transfer_id")),
        Index("ix_transfers_status_updated", ("status", "updated_at", "transfer_id")),
        # The list filtered by version (one range per status) and the counts per version.
        Index("ix_transfers_status_version", ("status", "version", "updated_at", "transfer_id")),
        Index(
            "ix_transfers_source", ("source", "created_at"), descending=frozenset({"created_at"})
        ),
    ),
)

ACCOUNTS: ReadModel[AccountRow] = ReadModel(
    name="accounts",
    entity_type="account",
    row_type=AccountRow,
    key="account_id",
    starts=_FACT,
    columns=(
        Column("account_id", Text(64), EntityId()),
        Column("balance", Money(14, 2), Latest(_FACT, "balance")),
        Column("on_hold", Money(14, 2), Latest(_FACT, "on_hold")),
        Column("status", Text(10), Latest(_FACT, "status")),
        Column("updated_at", Timestamp(), LatestTime(_FACT)),
        Column("last_sequence", Integer(), LatestSequence(_FACT)),
    ),
)
