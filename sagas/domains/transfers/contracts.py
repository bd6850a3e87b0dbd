"""Money transfers: what a client asks for, what an account answers, what is recorded."""

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field, model_validator

from sagas.machinery.legs import Port
from sagas.messages import Message, Summary

TransferStatus = Literal["PENDING", "COMMITTING", "COMPLETED", "FAILED"]
FINAL_STATUSES: frozenset[str] = frozenset({"COMPLETED", "FAILED"})
FAILED_STATUSES: frozenset[str] = frozenset({"FAILED"})
AccountId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]
Money = Annotated[Decimal, Field(ge=0, max_digits=14, decimal_places=2)]
Amount = Annotated[Decimal, Field(gt=0, max_digits=14, decimal_places=2)]

# --- commands -------------------------------------------------------------------------


class RequestTransfer(Message):
    """Move ``amount`` from ``source`` to ``destination`` (keyed by the transfer id)."""

    TYPE = "transfer.Request"
    source: AccountId
    destination: AccountId
    amount: Amount

    @model_validator(mode="after")
    def _two_accounts(self) -> "RequestTransfer":
        if self.source == self.destination:
            raise ValueError("source and destination must be two accounts")
        return self


class OpenAccount(Message):
    """Open the account (keyed by its id) with ``balance``, or set the balance of an open one."""

    TYPE = "account.Open"
    balance: Money


class CloseAccount(Message):
    TYPE = "account.Close"


class HoldFunds(Message):
    """Hold ``amount`` of the balance for a transfer out."""

    TYPE = "account.HoldFunds"
    reservation_id: str = Field(min_length=1, max_length=200)
    amount: Amount


class PrepareCredit(Message):
    """Promise to take ``amount`` in: refused by a closed or unknown account."""

    TYPE = "account.PrepareCredit"
    reservation_id: str = Field(min_length=1, max_length=200)
    amount: Amount


class Commit(Message):
    """Debit a held amount, or credit a prepared one."""

    TYPE = "account.Commit"
    reservation_id: str = Field(min_length=1, max_length=200)


class Release(Message):
    TYPE = "account.Release"
    reservation_id: str = Field(min_length=1, max_length=200)


# --- facts: the transfer --------------------------------------------------------------


class TransferRequested(Message):
    TYPE = "transfer.Requested"
    # The saga starts PENDING with this fact (no status event says so): the timeline says it.
    SUMMARY = Summary("{amount} from {source} to {destination} requested; status PENDING")
    source: str
    destination: str
    amount: Decimal


class TransferStatusChanged(Message):
    TYPE = "transfer.StatusChanged"
    SUMMARY = Summary("status {status}", when="reason", then="status {status}: {reason}")
    status: TransferStatus
    reason: str | None = None


# --- facts: an account, each with its totals after it ----------------------------------


class AccountFact(Message):
    balance: Decimal
    """What the account holds, including what is on hold for transfers out."""
    on_hold: Decimal
    status: Literal["unknown", "open", "closed"]


class AccountOpened(AccountFact):
    TYPE = "account.Opened"
    SUMMARY = Summary("account open, balance {balance}")


class AccountClosed(AccountFact):
    TYPE = "account.Closed"
    SUMMARY = Summary("account closed, balance {balance}")


class FundsHeld(AccountFact):
    TYPE = "account.FundsHeld"
    SUMMARY = Summary("{amount} held for {reservation_id}")
    reservation_id: str
    amount: Decimal


class HoldRefused(AccountFact):
    TYPE = "account.HoldRefused"
    SUMMARY = Summary("{reservation_id} refused: {reason}")
    reservation_id: str
    reason: str


class Committed(AccountFact):
    TYPE = "account.Committed"
    SUMMARY = Summary("{reservation_id} committed: {amount}")
    reservation_id: str
    amount: Decimal
    """Signed: negative for a debit, positive for a credit."""


class CommitRefused(AccountFact):
    TYPE = "account.CommitRefused"
    SUMMARY = Summary("commit of {reservation_id} refused: {reason}")
    reservation_id: str
    reason: str


class Released(AccountFact):
    TYPE = "account.Released"
    SUMMARY = Summary("{reservation_id} released")
    COMPENSATION = True
    reservation_id: str


ACCOUNTS = Port(
    held=FundsHeld,
    refused=HoldRefused,
    confirmed=Committed,
    confirm_refused=CommitRefused,
    released=Released,
    confirm=lambda rid: Commit(reservation_id=rid),
    release=lambda rid: Release(reservation_id=rid),
)
"""An account as a transfer reserves from it (a debit's hold and a credit's promise alike)."""
