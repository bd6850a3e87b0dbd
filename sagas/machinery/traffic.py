"""A domain's sample traffic and the rules its events keep: what lets the components that
exercise every domain (the Spark/online equality test, the fault harness) exercise a new
one without code of their own for it.

``setup`` opens the entities the sagas need (accounts, stock); ``sagas`` starts ``n`` of
them, in the order a client would send them, some bound to fail; ``invariants`` reads the
domain's events once everything has settled and names every rule broken (money created,
a hold left behind). All pure: commands are data, the rules read envelopes.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sagas.messages import Envelope, Message


@dataclass(frozen=True)
class Send:
    """One command: the channel it goes to and the key it is sent under (a saga's id is
    its key, and its saga id)."""

    channel: str
    key: str
    message: Message
    saga: bool = False
    """Sent to a saga: the key is also the saga id."""


@dataclass(frozen=True)
class Traffic:
    setup: Callable[[str], Sequence[Send]]
    """The entities the sagas need, under ids suffixed by a run's name (so runs on one
    topic set do not meet)."""
    sagas: Callable[[str, random.Random, int], Sequence[Send]]
    """``n`` sagas' commands for a run's name, drawn with the given random source."""
    invariants: Callable[[Sequence[Envelope]], list[str]]
    """The rules the domain's events (every entity's, in sequence order per entity) keep
    once every saga is final: one sentence per rule broken."""
