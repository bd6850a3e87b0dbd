"""A capacity ledger: reserve / confirm / cancel units of something scarce.

Product stock and course seats are both ledgers. Replies to the saga and domain events
use the same payload types: a fact is a fact, whoever needs to hear it.
"""

from typing import Literal

from pydantic import Field

from sagas.machinery.legs import Port
from sagas.messages import Message, Summary

MAX_UNITS = 2**31 - 1
"""Counts fit a 32-bit SQL INTEGER column of the read models; a command beyond it is refused
where it arrives, not by the database much later."""

# --- commands ---------------------------------------------------------------------------


class SetCapacity(Message):
    """Set the number of units on hand (stock count, seats of a course)."""

    TYPE = "ledger.SetCapacity"
    on_hand: int = Field(ge=0, le=MAX_UNITS)


class Reserve(Message):
    """Hold ``quantity`` units for ``reservation_id`` until confirmed, cancelled or expired."""

    TYPE = "ledger.Reserve"
    reservation_id: str
    quantity: int = Field(gt=0, le=MAX_UNITS)
    ttl_seconds: float = Field(gt=0)


class Confirm(Message):
    """Turn a held reservation into a sale: the units leave ``on_hand`` for good."""

    TYPE = "ledger.Confirm"
    reservation_id: str


class Cancel(Message):
    """Compensation: release a held reservation, or give back the units of a confirmed one."""

    TYPE = "ledger.Cancel"
    reservation_id: str


# --- facts (replies and domain events) ---------------------------------------------------


class LedgerFact(Message):
    """Every ledger fact carries the totals after it, so a projection needs no history."""

    on_hand: int
    reserved: int


class CapacitySet(LedgerFact):
    TYPE = "ledger.CapacitySet"


class CapacitySetRefused(LedgerFact):
    TYPE = "ledger.CapacitySetRefused"
    requested: int
    reason: str


class Reserved(LedgerFact):
    TYPE = "ledger.Reserved"
    SUMMARY = Summary("reserved {quantity} until {expires_at}")
    reservation_id: str
    quantity: int
    expires_at: str


class ReservationRejected(LedgerFact):
    TYPE = "ledger.ReservationRejected"
    SUMMARY = Summary("reservation rejected: {reason}")
    reservation_id: str
    quantity: int
    reason: str


class Confirmed(LedgerFact):
    TYPE = "ledger.Confirmed"
    SUMMARY = Summary("sold {quantity}")
    reservation_id: str
    quantity: int


class ConfirmRefused(LedgerFact):
    TYPE = "ledger.ConfirmRefused"
    SUMMARY = Summary("confirm refused: {reason}")
    reservation_id: str
    reason: str


class Released(LedgerFact):
    """Units returned: a hold cancelled or expired, or a confirmed sale compensated."""

    TYPE = "ledger.Released"
    COMPENSATION = True
    SUMMARY = Summary("released {quantity} ({reason})")
    reservation_id: str
    quantity: int
    reason: Literal["cancelled", "expired", "refunded"]


PORT = Port(
    held=Reserved,
    refused=ReservationRejected,
    confirmed=Confirmed,
    confirm_refused=ConfirmRefused,  # also the answer to a repeated or unknown reservation
    released=Released,
    confirm=lambda rid: Confirm(reservation_id=rid),
    release=lambda rid: Cancel(reservation_id=rid),
)
"""The ledger as a saga reserves from it (sagas/machinery/legs.py)."""
