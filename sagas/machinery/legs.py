"""A saga's reservations at its participants (its *legs*), and the protocol a reservation
participant speaks, as a saga sees it (its *port*).

Every participant a saga reserves something from answers the same three commands with the
same five answers, whatever it reserves (stock, a payment, a seat, credits, funds): a hold
is held or refused, a confirm is confirmed or refused, a release (or an expiry) is
released. A port names those types once, beside the participant's contract, so every saga
that uses the participant routes its answers the same way and declares the same types.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict

from sagas.machinery.frozen import validated_copy
from sagas.messages import Message

LegStatus = Literal[
    "none", "pending", "waitlisted", "held", "confirming", "confirmed", "releasing", "released",
    "rejected",
]  # fmt: skip
"""Where a leg stands as far as the saga knows. ``none``: not asked yet; ``rejected``: its
hold was refused (nothing to give back); ``released``: given back, or let go by the
participant."""
Outcome = Literal["held", "refused", "confirmed", "confirm_refused", "released"]

TAKEN: frozenset[str] = frozenset(
    {"pending", "waitlisted", "held", "confirming", "confirmed", "releasing"}
)
"""A leg that may exist at its participant: a compensation releases it."""
AWAITING: frozenset[str] = frozenset({"pending", "waitlisted", "confirming", "releasing"})
"""A leg whose participant has not answered the saga's last command about it."""
_NEWS: dict[Outcome, frozenset[str]] = {
    "held": frozenset({"pending", "waitlisted"}),
    "refused": frozenset({"pending", "waitlisted"}),
    "confirmed": frozenset({"confirming"}),
    "confirm_refused": frozenset({"confirming"}),
    "released": frozenset({"releasing", "held", "confirming"}),
}
"""The leg statuses in which an answer is news; in any other it is late or repeated."""
_AFTER: dict[Outcome, LegStatus] = {
    "held": "held",
    "refused": "rejected",
    "confirmed": "confirmed",
    "confirm_refused": "released",
    "released": "released",
}


class Leg(BaseModel):
    """One reservation a saga asks of one participant."""

    model_config = ConfigDict(frozen=True)
    key: str = ""
    """The participant's entity it is reserved at (a product, a course, an account; the
    saga's own id for a participant keyed by saga, like the payment)."""
    rid: str = ""
    """The reservation id the participant's answers name ("": its answers name none, and
    the saga has one leg at that participant)."""
    status: LegStatus = "none"

    def but(self, **changes: object) -> Self:
        """This leg with ``changes`` (field names and values checked)."""
        return validated_copy(self, changes)

    def is_news(self, outcome: Outcome) -> bool:
        return self.status in _NEWS[outcome]

    def fails(self, outcome: Outcome) -> bool:
        """The answer ends the flow's hope: a refusal, or a release the saga did not ask for
        (the participant let the hold expire)."""
        return outcome in ("refused", "confirm_refused") or (
            outcome == "released" and self.status != "releasing"
        )

    def after(self, outcome: Outcome) -> Self:
        return self.but(status=_AFTER[outcome])


@dataclass(frozen=True)
class Port:
    """A reservation participant's commands and answers, declared beside its contract."""

    held: type[Message]
    refused: type[Message]
    confirmed: type[Message]
    confirm_refused: type[Message]
    released: type[Message]
    confirm: Callable[[str], Message]
    """The confirm command for a reservation id."""
    release: Callable[[str], Message]
    """The release (cancel, void) command for a reservation id."""
    also: tuple[type[Message], ...] = ()
    """Other answers the participant may send a saga (a course's ``Waitlisted``): the saga
    handles those itself."""

    def answers(self) -> tuple[type[Message], ...]:
        return (self.held, *self.also, self.refused, self.confirmed, self.confirm_refused,
                self.released)  # fmt: skip

    def outcomes(self) -> dict[type[Message], Outcome | None]:
        found: dict[type[Message], Outcome | None] = dict.fromkeys(self.also)
        found |= {
            self.held: "held",
            self.refused: "refused",
            self.confirmed: "confirmed",
            self.confirm_refused: "confirm_refused",
            self.released: "released",
        }
        return found
