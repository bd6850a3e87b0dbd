"""What a saga definition declares about its statuses, for everything that reads them
(the timeline, ``/sagas/{id}``, ``?wait``, the daily analytics)."""

from __future__ import annotations

from dataclasses import dataclass

from sagas.messages import Message


@dataclass(frozen=True)
class SagaStatuses:
    """What a saga definition declares about its statuses: the event that announces a new
    one (a payload with ``status`` and ``reason``), every status, and the final ones (no
    step follows them)."""

    event: type[Message]
    statuses: tuple[str, ...]
    final: frozenset[str]

    def __post_init__(self) -> None:
        if not self.final <= set(self.statuses):
            raise ValueError(f"final statuses {sorted(self.final - set(self.statuses))} unknown")
        for name in ("status", "reason"):
            if name not in self.event.model_fields:
                raise ValueError(f"{self.event.__name__} has no {name!r} field")
