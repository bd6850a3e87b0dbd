"""The event topic as the checks see it: per-entity streams of domain events.

Records the harness wrote itself (poison) are set aside by their position; any other record
that is not a well-formed envelope is kept as malformed (a finding of its own).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from faults.topics import Raw
from sagas.catalog import saga_type
from sagas.contracts.orders import FINAL_STATUSES
from sagas.messages import ContractError, Envelope


@dataclass
class History:
    by_entity: dict[str, dict[int, list[Envelope]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    """entity key -> sequence -> every copy seen (an at-least-once re-send is a copy)."""
    positions: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    """message id -> (partition, offset) of every copy."""
    malformed: list[tuple[Raw, str]] = field(default_factory=list)
    count: int = 0

    @classmethod
    def of(cls, records: Iterable[Raw], skip: set[tuple[int, int]]) -> History:
        history = cls()
        for raw in records:
            if (raw.partition, raw.offset) in skip:
                continue
            try:
                event = Envelope.decode(raw.value)
            except ContractError as exc:
                history.malformed.append((raw, str(exc)))
                continue
            if event.sequence is None or event.entity_type is None:
                history.malformed.append((raw, "not a domain event (no sequence/entity_type)"))
                continue
            history.by_entity[event.key][event.sequence].append(event)
            history.positions[event.message_id].append((raw.partition, raw.offset))
            history.count += 1
        return history

    def stream(self, key: str) -> list[Envelope]:
        """One copy per sequence, in sequence order."""
        numbered = self.by_entity.get(key, {})
        return [numbered[s][0] for s in sorted(numbered)]

    def contiguous(self, key: str) -> list[Envelope]:
        """The stream up to its first gap: what a sequence-gated reader can apply."""
        out = []
        for expected, event in enumerate(self.stream(key), start=1):
            if event.sequence != expected:
                break
            out.append(event)
        return out

    def entities(self, entity_type: str) -> list[str]:
        prefix = f"{entity_type}:"
        return [k for k in self.by_entity if k.startswith(prefix)]

    def order_status(self, order_id: str) -> str | None:
        """The status the order's events put it in last (None: none yet)."""
        return self.saga_status(f"order:{order_id}")

    def saga_status(self, saga_key: str) -> str | None:
        """The status the saga's events put it in last, as its type declares them: its
        start fact (its first status) or a status event (None: none yet)."""
        statuses = saga_type(saga_key.split(":", 1)[0]).statuses
        status = None
        for event in self.stream(saga_key):
            status = statuses.announced(event.type, event.payload) or status
        return status

    def is_final(self, order_id: str) -> bool:
        return self.order_status(order_id) in FINAL_STATUSES

    def describe(self, key: str, last: int = 12) -> list[str]:
        """The entity's last events, a line each, for a violation report."""
        lines = []
        for event in self.stream(key)[-last:]:
            p = event.payload
            what = p.get("status") or p.get("reservation_id") or p.get("reason") or ""
            extra = p.get("reason") if p.get("status") else None
            lines.append(
                f"  {key} #{event.sequence} {event.type} {what}"
                + (f" ({extra})" if extra else "")
                + f" at {event.occurred_at.isoformat()}"
            )
        return lines or [f"  {key}: no event on the event topic"]
