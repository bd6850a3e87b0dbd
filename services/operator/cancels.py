"""How an operator cancels a saga of each type: its cancel command, and the command that
started it rebuilt from its read-model row (the dry run replays the definition from it).

Each domain declares its own (``Domain.cancellations``, sagas/domains/); a saga type
without one cannot be cancelled by an operator, and :func:`cancellation` says so.
"""

from __future__ import annotations

from sagas.domains import DOMAINS
from sagas.machinery.domain import Cancellation as Cancellation

CANCELLATIONS: dict[str, Cancellation] = {
    c.entity_type: c for d in DOMAINS for c in d.cancellations
}


class NotCancellable(LookupError):
    """A saga type whose cancel command is not declared."""


def cancellation(entity_type: str) -> Cancellation:
    found = CANCELLATIONS.get(entity_type)
    if found is None:
        raise NotCancellable(
            f"an operator cannot cancel a {entity_type} saga: its cancel command is not "
            "declared (its domain's cancellations, sagas/domains/)"
        )
    return found
