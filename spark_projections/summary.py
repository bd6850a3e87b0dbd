"""The timeline's ``summary`` column, natively: :func:`sagas.projections.rows.summarize`
as one CASE expression over the parsed payload.

Each entry names the contract class and formats its line from the same fields, in the same
way (decimals print as written, which is ``str(Decimal)`` for a validated payload); any
type without an entry prints its type name, like ``summarize``'s fallback. The unit tests
run both on a golden event of every registered type and every branch, so a new case in
``summarize`` fails them until it is added here.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F

from sagas.contracts import ledger, orders, payment
from sagas.messages import Message

Format = Callable[[Column], Column]
"""Payload struct -> the summary line."""


def _s(*parts: str | Column) -> Column:
    return F.concat(*[F.lit(p) if isinstance(p, str) else p.cast("string") for p in parts])


def _placed(p: Column) -> Column:
    lines = F.size(p["lines"])
    return _s("order placed by ", p["customer_id"], ": ", lines, " line(s), total ", p["total"])


def _status(p: Column) -> Column:
    return F.when(p["reason"].isNull(), _s("status ", p["status"])).otherwise(
        _s("status ", p["status"], ": ", p["reason"])
    )


def _voided(p: Column) -> Column:
    verb = F.when(p["refunded"], F.lit("refunded")).otherwise(F.lit("voided"))
    return _s("payment of ", p["amount"], " ", verb)


FORMATS: dict[type[Message], Format] = {
    orders.OrderPlaced: _placed,
    orders.OrderStatusChanged: _status,
    orders.CancelRefused: lambda p: _s("cancel refused: ", p["reason"]),
    ledger.Reserved: lambda p: _s("reserved ", p["quantity"], " until ", p["expires_at"]),
    ledger.ReservationRejected: lambda p: _s("reservation rejected: ", p["reason"]),
    ledger.Confirmed: lambda p: _s("sold ", p["quantity"]),
    ledger.ConfirmRefused: lambda p: _s("confirm refused: ", p["reason"]),
    ledger.Released: lambda p: _s("released ", p["quantity"], " (", p["reason"], ")"),
    payment.Authorized: lambda p: _s("payment of ", p["amount"], " authorized (", p["method"], ")"),
    payment.Declined: lambda p: _s("payment declined: ", p["reason"]),
    payment.Captured: lambda p: _s("payment of ", p["amount"], " captured"),
    payment.Voided: _voided,
}


def summary(type_column: Column, payload: Column) -> Column:
    """The summary of an event of a known type (``type_column`` names it)."""
    cases = None
    for model, fmt in FORMATS.items():
        line = fmt(payload)
        cases = (F if cases is None else cases).when(type_column == model.TYPE, line)
    assert cases is not None
    result: Column = cases.otherwise(type_column)
    return result
