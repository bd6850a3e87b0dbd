"""Golden envelopes: one domain event of every registered message type (every branch of
``summarize`` and of the folds), built from the contracts themselves so a new type is
covered the day it is registered."""

from __future__ import annotations

import types
import typing
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from sagas.contracts import enrollment as ec
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.ids import derive_id, external_command_id
from sagas.messages import Envelope, Message

T0 = datetime(2024, 5, 1, 9, 30, 0, 250000, tzinfo=UTC)


def sample(model: type[BaseModel], **overrides: Any) -> Any:
    """An instance of ``model`` with a plausible value in every field."""
    values = {name: _value(name, f.annotation) for name, f in model.model_fields.items()}
    return model.model_validate(values | overrides)


def _value(name: str, annotation: Any) -> Any:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    if annotation is str:
        return f"{name}-1"
    if annotation is int:
        return 3
    if annotation is float:
        return 30.0
    if annotation is bool:
        return True
    if annotation is Decimal:
        return Decimal("12.50")
    if get_origin(annotation) is Literal:
        return get_args(annotation)[-1]
    if get_origin(annotation) is tuple:
        item = get_args(annotation)[0]
        if isinstance(item, type) and issubclass(item, BaseModel):
            ids = {"product_id": "p-1"} if "product_id" in item.model_fields else {}
            return (sample(item, **ids),)
        return (_value(name, item),)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sample(annotation)
    raise TypeError(f"no sample for {name}: {annotation}")


def variants() -> list[Message]:
    """One message of every registered type, plus the branches that print differently."""
    messages = [sample(model) for _, model in sorted(Message.known_types().items())]
    return [
        *messages,
        oc.OrderStatusChanged(status="PENDING"),
        oc.OrderStatusChanged(status="CANCELLED", reason="timeout"),
        pc.Voided(amount=Decimal("7"), refunded=False),
        pc.Voided(amount=Decimal("7.10"), refunded=True),
        ec.EnrollmentStatusChanged(status="PENDING", course_id="c-1"),
        ec.EnrollmentStatusChanged(status="WAITLISTED", course_id="c-1", waitlist_position=2),
        sample(ec.SeatHeld, promoted=False),
        ec.EnrollmentStatusChanged(status="TRANSFERRING", course_id="c-1", transfer_to="c-2"),
        # Rosters and students empty and longer, a title that is not ASCII (still native).
        sample(ec.CourseSet, enrolled=(), waitlist=()),
        sample(
            ec.CourseSet,
            title="Cours d'été ✓",
            enrolled=("s-1", "s-2"),
            waitlist=tuple(_queued(i) for i in (1, 2, 3)),
        ),
        sample(ec.StudentSet, enrollments=()),
        sample(
            ec.CreditsHeld,
            enrollments=(
                ec.StudentEnrollment(
                    enrollment_id="e-1", course_id="c-1", credits=3, status="held"
                ),
                ec.StudentEnrollment(
                    enrollment_id="e-2", course_id="c-2", credits=0, status="enrolled"
                ),
            ),
        ),
    ]


def _queued(position: int) -> ec.WaitlistEntry:
    return ec.WaitlistEntry(
        enrollment_id=f"e-{position}", student_id=f"s-{position}", position=position
    )


def golden_events() -> list[Envelope]:
    """Every variant as a domain event of its own entity (sequence 1), naming a saga."""
    events = []
    for i, message in enumerate(variants()):
        entity_type = message.TYPE.split(".", 1)[0]
        key = f"{entity_type}:g{i}"
        events.append(
            Envelope.wrap(
                message,
                message_id=derive_id(key, "1"),
                key=key,
                occurred_at=T0 + timedelta(seconds=i),
                saga_id=f"saga-{i}",
                causation_id=external_command_id(key, "golden"),
                entity_type=entity_type,
                sequence=1,
            )
        )
    return events
