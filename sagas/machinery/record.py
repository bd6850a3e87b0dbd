"""The value stored per key in a process's table."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic

from pydantic import BaseModel, ConfigDict

from sagas.machinery.process import S


class Record(BaseModel, Generic[S]):
    """A process's state plus the bookkeeping the machinery keeps beside it.

    ``seen`` is a bounded window of processed message ids: redeliveries after a crash or a
    producer retry arrive within it. ``deadlines`` are durable timers: they survive restarts
    and rebalances because they live in the table, not in a process's memory.
    """

    model_config = ConfigDict(frozen=True)

    state: S
    seen: tuple[str, ...] = ()
    sequence: int = 0
    deadlines: dict[str, datetime] = {}
    started_at: datetime | None = None
    """When the key's first decision was applied (a saga's start: its duration's origin)."""
    stepped_at: datetime | None = None
    """When its latest decision was applied (a saga's previous step: its step latency's)."""

    def encode(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def codec(cls, state_type: type[Any]) -> type[Record[Any]]:
        return cls[state_type]  # type: ignore[index,no-any-return]

    def next_deadline(self) -> datetime | None:
        return min(self.deadlines.values(), default=None)
