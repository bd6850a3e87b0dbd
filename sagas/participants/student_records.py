"""How student records stored before the reservation primitive read.

Until then a student's state held ``max_credits``, its holds and enrollments as
:class:`Credits` by reservation id, and each finished reservation as ``[what, at]`` (what
became of it, in words). They read as today's :class:`~sagas.participants.student.StudentState`
(the primitive's totals, ``courses`` beside them) with no change to their facts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from sagas.machinery.reservations import Closed


class Credits(BaseModel):
    """What a student's reservation is for (the course, its credits, the one it replaces)."""

    model_config = ConfigDict(frozen=True)
    enrollment_id: str
    course_id: str
    credits: int
    replaces: str | None = None


def Finished(what: str, at: int = 0) -> Closed[int]:
    """A finished reservation as records stored before the primitive hold it (what became of
    it, in words, and when), read as the primitive's :class:`Closed`."""
    if what.startswith("refused: "):
        return Closed("rejected", 0, at, what.removeprefix("refused: "))
    if what == "released before it was held":
        return Closed("tombstone", 0, at)
    if what in ("released (cancelled)", "released (refunded)"):
        return Closed("cancelled" if "cancelled" in what else "refunded", 0, at)
    return Closed("refunded", 0, at, what)  # "replaced by a transfer"


def closed_from_words(stored: Any) -> Any:
    # Stored before the primitive: ``[what, at]``, or before ages, the text alone.
    if isinstance(stored, str):
        return Finished(stored)
    if isinstance(stored, list | tuple) and len(stored) == 2 and isinstance(stored[0], str):
        return Finished(stored[0], stored[1])
    return stored


def from_credits(data: Any) -> Any:
    """A stored student state in today's shape (one of today's as it is)."""
    if not isinstance(data, dict) or "on_hand" in data:
        return data
    holds = {r: Credits.model_validate(c) for r, c in data.get("holds", {}).items()}
    enrolled = {r: Credits.model_validate(c) for r, c in data.get("enrolled", {}).items()}

    def holding(hold: Credits) -> int:  # a transfer held only the difference
        replaced = enrolled.get(hold.replaces) if hold.replaces else None
        return max(0, hold.credits - (replaced.credits if replaced else 0))

    return {
        **{k: v for k, v in data.items() if k != "max_credits"},
        "on_hand": data.get("max_credits", 0),
        "holds": {r: {"amount": holding(c)} for r, c in holds.items()},
        "committed": {r: c.credits for r, c in enrolled.items()},
        "courses": {**holds, **enrolled},
    }
