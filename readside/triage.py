"""Sort an incoming record: a domain event to project, or a record to dead-letter (and why).

An event of a type this projector does not know is *not* rejected here: it is a well-formed
fact from a newer producer, and it must take its place in its entity's sequence
(see :mod:`sagas.projections.entity`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from readside.limits import unstorable_reason
from sagas.messages import ContractError, Envelope, Message
from sagas.projections.entity import is_known
from sagas.untrusted import bounded

log = logging.getLogger(__name__)


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
    """Never raises: whatever a record holds, it is sorted, so no record can stop the
    projector (an exception here would fail the batch again at every restart)."""
    try:
        event = Envelope.decode(value)
        message = _payload(event, key)
        reason = unstorable_reason(event, message)
    except ContractError as exc:
        return Rejected(str(exc))
    except Exception as exc:  # a bug met by a strange record: park the record, go on
        log.exception("triage failed on a record; dead-lettering it")
        return Rejected(bounded(f"{type(exc).__name__}: {exc}"))
    return event if reason is None else Rejected(f"does not fit the read model: {reason}")


def unknown_type_reason(event: Envelope) -> str | None:
    """Why an event whose type this projector does not know is also dead-lettered (it is
    still applied as a skipped event, so its entity is not blocked), or None if known."""
    if is_known(event):
        return None
    return bounded(
        f"unknown event type {event.type!r} (entity {event.key} #{event.sequence}), its "
        "sequence still counts: upgrade the projector and rebuild the read models to show it"
    )


def _payload(event: Envelope, key: bytes | None) -> Message | None:
    """The validated payload (None for an unknown type); raises ContractError when the
    record is not a well-formed domain event."""
    if event.entity_type is None or event.sequence is None:
        raise ContractError(f"{event.type} is not a domain event: no entity_type or sequence")
    prefix = f"{event.entity_type}:"
    if not event.key.startswith(prefix) or event.key == prefix:
        raise ContractError(f"key {event.key!r} does not name a {event.entity_type!r} entity")
    if key is None:
        raise ContractError(f"record has no key (envelope key {event.key!r})")
    if key != event.key.encode():
        shown = key[:60].decode(errors="replace")
        raise ContractError(f"record key {shown!r} differs from envelope key {event.key!r}")
    return event.message() if is_known(event) else None
