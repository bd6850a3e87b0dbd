"""Per-entity sequence gating: apply each entity's events once, in order, with no gaps.

Duplicates (a sequence already applied) are dropped; an event past a gap is held until the
missing ones arrive. Both the projector and the Spark rebuild decide with :func:`gate`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sagas.messages import Envelope


@dataclass(frozen=True)
class Gated:
    ready: tuple[Envelope, ...]
    """Events to apply now, in sequence order."""
    held: tuple[Envelope, ...]
    """Events past a gap, in sequence order, to keep until the gap fills."""
    duplicates: int
    last_sequence: int


def gate(last_sequence: int, candidates: Iterable[Envelope]) -> Gated:
    """Split ``candidates`` (new arrivals plus anything held before) for one entity."""
    by_sequence: dict[int, Envelope] = {}
    duplicates = 0
    for event in candidates:
        seq = event.sequence or 0
        if seq <= last_sequence or seq in by_sequence:
            duplicates += 1
            continue
        by_sequence[seq] = event
    ready = []
    nxt = last_sequence + 1
    while nxt in by_sequence:
        ready.append(by_sequence.pop(nxt))
        nxt += 1
    held = tuple(by_sequence[s] for s in sorted(by_sequence))
    return Gated(tuple(ready), held, duplicates, nxt - 1)
