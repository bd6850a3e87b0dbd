"""Payment participant contracts: authorize / capture / void against a gateway."""

from decimal import Decimal

from pydantic import Field

from sagas.machinery.legs import Port
from sagas.messages import Message, Summary


class Authorize(Message):
    TYPE = "payment.Authorize"
    amount: Decimal = Field(ge=0)
    method: str


class Capture(Message):
    TYPE = "payment.Capture"


class Void(Message):
    """Compensation: void an authorization, or refund a capture."""

    TYPE = "payment.Void"


class Authorized(Message):
    TYPE = "payment.Authorized"
    SUMMARY = Summary("payment of {amount} authorized ({method})")
    amount: Decimal
    method: str


class Declined(Message):
    TYPE = "payment.Declined"
    SUMMARY = Summary("payment declined: {reason}")
    amount: Decimal
    method: str
    reason: str


class Captured(Message):
    TYPE = "payment.Captured"
    SUMMARY = Summary("payment of {amount} captured")
    amount: Decimal


class CaptureRefused(Message):
    TYPE = "payment.CaptureRefused"
    reason: str


class Voided(Message):
    TYPE = "payment.Voided"
    COMPENSATION = True
    SUMMARY = Summary(
        "payment of {amount} voided", when="refunded", then="payment of {amount} refunded"
    )
    amount: Decimal
    refunded: bool


PORT = Port(
    held=Authorized,
    refused=Declined,
    confirmed=Captured,
    confirm_refused=CaptureRefused,
    released=Voided,
    confirm=lambda _: Capture(),  # one payment per saga: keyed by the saga id, no reservation id
    release=lambda _: Void(),
)
"""The payment as a saga reserves from it (sagas/machinery/legs.py)."""
