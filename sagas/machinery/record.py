"""The value stored per key in a process's table."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, get_origin

from pydantic import BaseModel, ConfigDict, Field

from sagas.machinery.frozen import checked_copy
from sagas.machinery.history import LOAD_CHUNKS, History, chunk_key
from sagas.machinery.process import S

FORGET_DEADLINE = "machinery.forget"
"""The deadline on which a retired key's marker is deleted (:mod:`sagas.machinery.retirement`)."""


class Record(BaseModel, Generic[S]):
    """A process's state plus the bookkeeping the machinery keeps beside it.

    ``seen`` is a bounded window of processed message ids: redeliveries after a crash or a
    producer retry arrive within it (it is stored in chunks, so a hot key's record does not
    carry it whole: :mod:`sagas.machinery.history`). ``deadlines`` are durable timers: they
    survive restarts and rebalances because they live in the table, not in a process's
    memory.
    """

    model_config = ConfigDict(frozen=True)

    version: int | None = None
    """The version of its definition that started it (:mod:`sagas.machinery.versions`);
    None: an unversioned definition's, or a record from before versions. Declared first:
    a versioned state is read by it."""
    state: S
    seen: History[None] = Field(default_factory=History)
    sequence: int = 0
    deadlines: dict[str, datetime] = {}
    started_at: datetime | None = None
    """When the key's first decision was applied (a saga's start: its duration's origin)."""
    stepped_at: datetime | None = None
    """When its latest decision was applied (a saga's previous step: its step latency's)."""
    retired_at: datetime | None = None
    """Set on a retired key's marker (:mod:`sagas.machinery.retirement`): the record it
    replaced could no longer change and is gone; every message for the key is dropped."""

    def encode(self) -> bytes:
        """The record's own value (its histories' tails; their chunks are :meth:`writes`)."""
        unversioned = set() if self.version is not None else _UNVERSIONED  # bytes as before
        if self.retired_at is None:  # every record but a marker: as before retirement
            return self.model_dump_json(exclude=_NOT_RETIRED | unversioned).encode()
        return self.model_dump_json(exclude=unversioned).encode()

    def writes(
        self, key: str, stored: Record[Any] | None
    ) -> tuple[Record[Any], list[tuple[str, bytes | None]]]:
        """What storing this record as ``key``'s state writes when the table holds
        ``stored``, in the order it must be written: its histories' chunks sealed since
        ``stored`` (each written once), then the deletions (None) of the chunks ``stored``
        no longer read, then the record itself. Returns the record as stored (its
        histories noting the deletions) and those writes."""
        record: Record[Any] = self
        chunks: list[tuple[str, bytes | None]] = []
        sweeps: list[tuple[str, bytes | None]] = []
        for path in _history_paths(type(self)):
            history = _at(self, path)
            if not isinstance(history, History):
                continue
            before = _at(stored, path)
            name = path[-1]
            chunks += [
                (chunk_key(key, f"{name}/{at}"), raw) for at, raw in history.new_chunks(before)
            ]
            sweeps += [(chunk_key(key, f"{name}/{at}"), None) for at in history.sweepable(before)]
            if (swept := history.swept_after(before)) is not history:
                record = _replace(record, path, swept)
        return record, [*chunks, *sweeps, (key, record.encode())]

    def marker(self, initial: Any, now: datetime, forget_at: datetime) -> Record[Any]:
        """The small record that replaces this one when it retires: the initial state, no
        entries in its histories (their positions kept, so the chunks this record's
        histories sealed are deleted with the marker: :meth:`deletes`), no deadline but
        the one that forgets it."""
        marker: Record[Any] = type(self)(
            state=initial,
            sequence=self.sequence,
            retired_at=now,
            deadlines={FORGET_DEADLINE: forget_at},
            started_at=self.started_at,
            stepped_at=now,
        )
        for path in _history_paths(type(self)):
            history = _at(self, path)
            if isinstance(history, History):
                marker = _replace(marker, path, history.emptied())
        return marker

    def deletes(self, key: str) -> list[tuple[str, None]]:
        """What deleting this stored record writes, in order: its histories' chunks that
        may still be in the table, then the record itself. Only a record that reads no
        chunk (a marker) is deleted so: a crash between the writes leaves it readable,
        and the replayed deletion deletes the rest."""
        chunks: list[tuple[str, None]] = []
        for path in _history_paths(type(self)):
            history = _at(self, path)
            if not isinstance(history, History):
                continue
            if history.reads_chunks():
                raise ValueError(f"{key!r}: a record that reads chunks is retired first")
            name = path[-1]
            chunks += [(chunk_key(key, f"{name}/{at}"), None) for at in history.leftover_chunks()]
        return [*chunks, (key, None)]

    @classmethod
    def decode(cls, key: str, raw: bytes, load: Callable[[str], bytes | None]) -> Record[Any]:
        """``key``'s record from its stored value, its histories' chunks read with ``load``
        (a table key -> its value)."""
        context = {LOAD_CHUNKS: lambda name: load(chunk_key(key, name))}
        return cls.model_validate_json(raw, context=context)

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
        ``,"deadlines":{...},"started_at":X,"stepped_at":Y,"retired_at":Z}`` where X, Y and Z
        are ``null`` or a datetime string (no quote, no backslash; a record stored before
        retirement existed ends at Y). The last ``,"started_at":`` is that
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


_NOT_RETIRED = {"retired_at"}
_UNVERSIONED = {"version"}
_STARTED_AT = b',"started_at":'
_NO_DEADLINES = b',"deadlines":{}'
_TAIL = re.compile(
    rb'(?:null|"[^"\\]*"),"stepped_at":(?:null|"[^"\\]*")(?:,"retired_at":(?:null|"[^"\\]*"))?\}'
)


@functools.cache
def _history_paths(model_type: type[BaseModel]) -> tuple[tuple[str, ...], ...]:
    """Where a model of this type holds a :class:`History`: in its fields, or in the fields
    of the models its fields are declared as (read once per type, from the declarations).
    A chunk is named by its field's name alone (validation knows no more), so two histories
    of one record must not share a name."""
    paths: list[tuple[str, ...]] = []
    for name, field in model_type.model_fields.items():
        declared = field.annotation
        if declared is History or get_origin(declared) is History:
            paths.append((name,))
        elif isinstance(declared, type) and issubclass(declared, BaseModel):
            paths += [(name, *inner) for inner in _history_paths(declared)]
    names = [path[-1] for path in paths]
    if len(set(names)) < len(names):
        raise TypeError(f"{model_type.__name__}: two histories share a name in {paths}")
    return tuple(paths)


def _at(model: BaseModel | None, path: tuple[str, ...]) -> Any:
    for name in path:
        if model is None:
            return None
        model = getattr(model, name, None)
    return model


def _replace(model: Any, path: tuple[str, ...], value: Any) -> Any:
    head, rest = path[0], path[1:]
    inner = _replace(getattr(model, head), rest, value) if rest else value
    return checked_copy(model, {head: inner})
