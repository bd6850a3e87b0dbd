"""How an operator cancels a saga of each type: its cancel command, and the command that
started it rebuilt from its read-model row (the dry run replays the definition from it).

The one place this is declared until the domains declare it (sagas/domains/, owned by the
domains' authors: asked for in issue 32's note); a saga type missing here cannot be
cancelled by an operator, and :func:`cancellation` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sagas.contracts import enrollment as e
from sagas.contracts import orders as oc
from sagas.messages import Message


@dataclass(frozen=True)
class Cancellation:
    entity_type: str
    command: Callable[[str], Message]
    """The saga's cancel command, with the operator's reason."""
    started_by: Callable[[Any], Message]
    """The command that started the saga, from its read-model row."""


CANCELLATIONS: dict[str, Cancellation] = {
    c.entity_type: c
    for c in (
        Cancellation(
            "order",
            lambda reason: oc.CancelOrder(reason=reason),
            lambda row: oc.PlaceOrder(
                customer_id=row.customer_id,
                lines=row.lines,
                payment=oc.PaymentDetails(method=row.payment_method),
            ),
        ),
        Cancellation(
            "enrollment",
            lambda reason: e.Drop(reason=reason),
            lambda row: e.Enroll(student_id=row.student_id, course_id=row.course_id),
        ),
    )
}


class NotCancellable(LookupError):
    """A saga type whose cancel command is not declared."""


def cancellation(entity_type: str) -> Cancellation:
    found = CANCELLATIONS.get(entity_type)
    if found is None:
        raise NotCancellable(
            f"an operator cannot cancel a {entity_type} saga: its cancel command is not "
            "declared (services/operator/cancels.py)"
        )
    return found
