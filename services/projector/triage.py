"""Sort an incoming record: a domain event to project, or a record to dead-letter (and why).

An event of a type this projector does not know is *not* rejected here: it is a well-formed
fact from a newer producer, and it must take its place in its entity's sequence
(see :mod:`sagas.projections.entity`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sagas.messages import ContractError, Envelope, Message
from sagas.projections.entity import is_known
from services.readmodels.limits import unstorable_reason


@dataclass(frozen=True)
class Positioned:
    """A domain event and where it sits in the log."""

    event: Envelope
    partition: int
    offset: int


@dataclass(frozen=True)
class Rejected:
    reason: str


def triage(key: bytes | None, value: bytes | None) -> Envelope | Rejected:
    try:
        event = Envelope.decode(value)
        message = _payload(event, key)
    except ContractError as exc:
        return Rejected(str(exc))
    reason = unstorable_reason(event, message)
    return event if reason is None else Rejected(f"does not fit the read model: {reason}")


def _payload(event: Envelope, key: bytes | None) -> Message | None:
    """The validated payload (None for an unknown type); raises ContractError when the
    record is not a well-formed domain event."""
    if event.entity_type is None or event.sequence is None:
        raise ContractError(f"{event.type} is not a domain event: no entity_type or sequence")
    prefix = f"{event.entity_type}:"
    if not event.key.startswith(prefix) or event.key == prefix:
        raise ContractError(f"key {event.key!r} does not name a {event.entity_type!r} entity")
    if key is not None and key != event.key.encode():
        raise ContractError(f"record key {key!r} differs from envelope key {event.key!r}")
    return event.message() if is_known(event) else None
