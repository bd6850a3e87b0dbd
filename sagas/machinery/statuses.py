"""What a saga definition declares about its statuses, for everything that reads them
(the timeline, ``/sagas/{id}``, ``?wait``, the daily analytics)."""

from __future__ import annotations

from dataclasses import dataclass

from sagas.messages import Message


@dataclass(frozen=True)
class SagaStatuses:
    """What a saga definition declares about its statuses: the event that announces a new
    one (a payload with ``status`` and ``reason``), every status, the final ones (no step
    follows them) and the settled ones (a client waiting for an outcome stops there).

    Settled is final unless said otherwise. A saga whose instances rest in a status that a
    later command continues (an enrollment that is ``ENROLLED`` until it is dropped or
    transferred) lists those statuses as settled but not final.
    """

    event: type[Message]
    statuses: tuple[str, ...]
    final: frozenset[str]
    settled: frozenset[str] = frozenset()
    failed: frozenset[str] = frozenset()
    """The final statuses that are failures (the saga compensated or was refused): what the
    console lists as failed sagas, with their reasons."""
    start: type[Message] | None = None
    """The fact that starts an instance. It puts the saga in its first status
    (``statuses[0]``) by itself: no status event follows it to say so (one record per saga
    fewer; streams written before that carry one, which says the same)."""

    def __post_init__(self) -> None:
        if not self.final <= set(self.statuses):
            raise ValueError(f"final statuses {sorted(self.final - set(self.statuses))} unknown")
        if not self.settled:
            object.__setattr__(self, "settled", self.final)
        if not self.final <= self.settled <= set(self.statuses):
            raise ValueError("settled statuses must include the final ones and be known")
        if not self.failed <= self.final:
            raise ValueError(f"failed statuses {sorted(self.failed - self.final)} are not final")
        for name in ("status", "reason"):
            if name not in self.event.model_fields:
                raise ValueError(f"{self.event.__name__} has no {name!r} field")

    @property
    def initial(self) -> str:
        """The status an instance is in once its ``start`` fact is written."""
        return self.statuses[0]

    def announced(self, event_type: str, payload: dict[str, object]) -> str | None:
        """The status an event of this saga's stream puts it in (None: it changes none)."""
        if event_type == self.event.TYPE:
            status = payload.get("status")
            return status if isinstance(status, str) else None
        if self.start is not None and event_type == self.start.TYPE:
            return self.initial
        return None
