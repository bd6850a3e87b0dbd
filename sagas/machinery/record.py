"""The value stored per key in a process's table."""

from __future__ import annotations

import re
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

    @staticmethod
    def surely_without_deadlines(raw: bytes) -> bool:
        """True when ``raw``, as :meth:`encode` wrote it, holds no deadline: told from its
        last few dozen bytes, without decoding the state before them (False: decode to know).

        The fields are dumped in declaration order, so an encoded record ends with
        ``,"deadlines":{...},"started_at":X,"stepped_at":Y}`` where X and Y are ``null`` or a
        datetime string (no quote, no backslash). The last ``,"started_at":`` is that
        field's own (what follows it cannot hold another); inside a string of the state it
        would read ``,\\"started_at\\":``. A non-empty ``deadlines`` ends with a datetime's
        closing quote, never with ``{}``. Any other shape (a record of a future layout)
        answers False, which only costs a decode.
        """
        at = raw.rfind(_STARTED_AT)
        return (
            at > 0
            and _TAIL.fullmatch(raw, at + len(_STARTED_AT)) is not None
            and raw.endswith(_NO_DEADLINES, 0, at)
        )


_STARTED_AT = b',"started_at":'
_NO_DEADLINES = b',"deadlines":{}'
_TAIL = re.compile(rb'(?:null|"[^"\\]*"),"stepped_at":(?:null|"[^"\\]*")\}')
