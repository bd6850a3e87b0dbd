"""A key's history (processed message ids, finished reservations), stored in chunks.

A hot key remembers hundreds of things it finished, to answer repeats: the message ids it
processed and, for a participant, the reservations it closed. Kept inline in the key's
record, that history was rewritten whole with every batch that touched the key: a
product's record grew to tens of KB within a minute of 1.5 orders/s, and writing it
(changelog, RocksDB) is what slowed the worker down as a run went on (BENCHMARKS.md, issue
11). A :class:`History` is the same insertion-ordered map as before for the code that
reads it, and is stored so that a write carries only what is new:

- every entry gets a position (0, 1, 2... per history); putting a key again gives it a new
  position, and pruning drops the oldest entries, so the live entries are always ordered by
  position and the first live one is the front;
- entries below ``tail_start`` (a multiple of :data:`CHUNK`) are sealed in chunks of
  :data:`CHUNK` positions. A chunk is written once, in the batch that sealed it, under a
  key of its own (:func:`chunk_key`), and never changes afterwards;
- the record itself carries the tail (the live entries at or after ``tail_start``, fewer
  than :data:`CHUNK`), the positions, and ``swept``: the chunks below it were deleted.

So the record stays small whatever the history's length, and a chunk is one more changelog
record per :data:`CHUNK` entries. The runner writes a key's new chunks before its record,
and deletes the chunks its stored record no longer needed after a later one; why a crash at
any point leaves a consistent history is in :mod:`services.worker.runner`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Any, Generic, TypeVar, get_args

from pydantic import GetCoreSchemaHandler, TypeAdapter
from pydantic_core import core_schema

V = TypeVar("V")

CHUNK = 32
"""Positions per sealed chunk: a record's tail holds fewer entries than this."""

CHUNK_SEPARATOR = "\x1f"
"""Between a record's key and its chunk's name. Not printable, so never part of an
envelope key (:class:`~sagas.messages.Envelope` refuses those): a chunk key cannot be a
record's key."""

ChunkLoader = Callable[[str], bytes | None]
"""The stored chunk of a given name (``field/index``), None if it is not there."""

LOAD_CHUNKS = "history_chunks"
"""Validation-context entry holding the :data:`ChunkLoader` of the record being decoded."""

PARTIAL = "history_partial"
"""Validation-context flag: decode without the chunks (the tail only), for readers that do
not need the history (the deadline scan); such a history refuses to change."""


def chunk_key(record_key: str, name: str) -> str:
    """The table key of a record's chunk named ``name`` (``seen/12``)."""
    return f"{record_key}{CHUNK_SEPARATOR}{name}"


def is_chunk_key(key: str) -> bool:
    return CHUNK_SEPARATOR in key


class HistoryError(ValueError):
    """A history that cannot be read (a chunk missing) or changed (decoded partially)."""


class History(Mapping[str, V], Generic[V]):
    """An immutable insertion-ordered map that grows at its end and is pruned at its front.

    Reads as a ``Mapping`` (oldest first); :meth:`put` and :meth:`prune` return a new one.
    """

    __slots__ = ("_complete", "_index", "_next", "_swept", "_tail", "_tail_start")

    def __init__(self) -> None:
        self._index: dict[str, tuple[int, V]] = {}
        """Live entries: key -> (position, value), in position order."""
        self._next = 0
        self._tail_start = 0
        self._tail: tuple[tuple[int, str, V], ...] = ()
        """Every entry put at or after ``tail_start``, in order: the live ones, and any
        since superseded or pruned (a reader drops those by position), at most CHUNK."""
        self._swept = 0
        self._complete = True

    # --- reading ---------------------------------------------------------------------

    def __getitem__(self, key: str) -> V:
        return self._index[key][1]

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __repr__(self) -> str:
        return f"History({dict(self.items())!r})"

    @property
    def front(self) -> int:
        """The position of the oldest live entry (the next position when empty)."""
        for position, _ in self._index.values():
            return position
        return self._next

    # --- changing --------------------------------------------------------------------

    def put(self, key: str, value: V) -> History[V]:
        """This history with ``key`` -> ``value`` last (a key already there moves last)."""
        self._check_complete()
        index = dict(self._index)  # a C-level copy; the old history stays as it was
        index.pop(key, None)
        index[key] = (self._next, value)
        return self._derive(index, self._next + 1, (self._next, key, value))

    def prune(self, expired: Callable[[V], bool] = lambda _: False, keep: int = 0) -> History[V]:
        """This history less its oldest entries that are ``expired`` (a prefix: it stops at
        the first that is not) and, beyond that, its oldest past the ``keep`` newest
        (``keep`` 0: no bound)."""
        drop = 0
        for _, value in self._index.values():
            if not expired(value):
                break
            drop += 1
        if keep > 0:
            drop = max(drop, len(self._index) - keep)
        if drop == 0:
            return self
        self._check_complete()
        return self._derive(dict(islice(self._index.items(), drop, None)), self._next)

    def _derive(
        self,
        index: dict[str, tuple[int, V]],
        next_position: int,
        added: tuple[int, str, V] | None = None,
    ) -> History[V]:
        new: History[V] = History()
        new._index = index
        new._next = next_position
        # Seal every full chunk behind the newest entry: the tail keeps fewer than CHUNK.
        new._tail_start = max(self._tail_start, next_position - next_position % CHUNK)
        tail = self._tail if added is None else (*self._tail, added)
        if new._tail_start != self._tail_start:
            tail = tuple(entry for entry in tail if entry[0] >= new._tail_start)
        new._tail = tail
        new._swept = self._swept
        return new

    def _check_complete(self) -> None:
        if not self._complete:
            raise HistoryError("a history decoded without its chunks cannot change")

    # --- storing ---------------------------------------------------------------------

    def new_chunks(self, stored: History[V] | None) -> list[tuple[int, bytes]]:
        """The chunks sealed since ``stored`` (the state the table holds; None: nothing)
        that this history still reads, each as (index, its live entries encoded). A chunk
        whose entries were all put again later is written empty: a reader loads every
        chunk from the front's to the tail's."""
        first = self.front // CHUNK
        if stored is not None:
            first = max(first, stored._tail_start // CHUNK)
        last = self._tail_start // CHUNK
        if first >= last:
            return []
        # The entries from ``first`` on are the newest: read the index from its end.
        chunks: dict[int, list[tuple[int, str, V]]] = {at: [] for at in range(first, last)}
        for key in reversed(self._index):
            position, value = self._index[key]
            if position < first * CHUNK:
                break
            if position < self._tail_start:
                chunks[position // CHUNK].append((position, key, value))
        return [(at, _CHUNK_WRITER.dump_json(entries[::-1])) for at, entries in chunks.items()]

    def sweepable(self, stored: History[V] | None) -> range:
        """Chunks ``stored`` no longer needed (wholly before its front), not yet deleted:
        neither it nor this history reads them, so deleting them is safe in any order."""
        if stored is None:
            return range(0)
        below = min(stored.front, stored._tail_start) // CHUNK
        return range(stored._swept, max(stored._swept, below))

    def swept_after(self, stored: History[V] | None) -> History[V]:
        """This history, noting that :meth:`sweepable` of ``stored`` is being deleted."""
        done = self.sweepable(stored)
        if len(done) == 0:
            return self
        new = self._derive(self._index, self._next)
        new._swept = done.stop
        return new

    def emptied(self) -> History[V]:
        """This history with every entry dropped and its positions kept: what a retired
        key's marker holds, so that the chunks it no longer reads stay known (in
        :meth:`leftover_chunks`) until the key is deleted. It reads no chunk."""
        new: History[V] = History()
        new._next = self._next
        new._tail_start = self._tail_start
        new._swept = self._swept
        return new

    def reads_chunks(self) -> bool:
        """Whether decoding this history needs a chunk of the table."""
        return self.front < self._tail_start

    def leftover_chunks(self) -> range:
        """Every chunk of this history that may still be in the table (not yet swept)."""
        return range(self._swept, self._tail_start // CHUNK)

    def _stored(self) -> dict[str, Any]:
        return {
            "next": self._next,
            "tail_start": self._tail_start,
            "swept": self._swept,
            "front": self.front,
            "tail": self._tail,
        }

    @classmethod
    def _restore(
        cls,
        data: Mapping[str, Any],
        entries: TypeAdapter[list[tuple[int, str, Any]]],
        load: ChunkLoader | None,
        name: str,
    ) -> History[Any]:
        new: History[Any] = History()
        new._next = _count(data, "next")
        new._tail_start = _count(data, "tail_start")
        new._swept = _count(data, "swept")
        front = _count(data, "front")
        if not (new._tail_start <= new._next and new._tail_start % CHUNK == 0):
            raise HistoryError(f"{name}: tail starts at {new._tail_start} of {new._next}")
        if not (front <= new._next and new._swept <= min(front, new._tail_start) // CHUNK):
            raise HistoryError(f"{name}: front {front}, swept {new._swept}: inconsistent")
        pieces: list[list[tuple[int, str, Any]]] = []
        if load is _PARTIAL:
            new._complete = False
        else:
            for at in range(front // CHUNK, new._tail_start // CHUNK):
                if load is None:
                    raise HistoryError(f"{name}: stored in chunks; decode it with its table")
                raw = load(f"{name}/{at}")
                if raw is None:
                    raise HistoryError(f"{name}: chunk {at} is missing from the table")
                pieces.append(entries.validate_json(raw))
        tail = entries.validate_python(data.get("tail", []))
        new._tail = tuple(entry for entry in tail if entry[0] >= new._tail_start)
        pieces.append(tail)
        index: dict[str, tuple[int, Any]] = {}
        for piece in pieces:
            for position, key, value in piece:
                if position >= front:
                    index.pop(key, None)  # a later position supersedes an earlier one
                    index[key] = (position, value)
        new._index = index
        return new

    @classmethod
    def _inline(cls, items: list[tuple[str, Any]]) -> History[Any]:
        """A history stored whole inside its record (records written before chunks): every
        entry in the tail, nothing sealed yet; the next write seals and stores the chunks."""
        new: History[Any] = History()
        new._index = {key: (position, value) for position, (key, value) in enumerate(items)}
        new._tail = tuple((position, key, value) for position, (key, value) in enumerate(items))
        new._next = len(items)
        return new

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        args = get_args(source)
        value_type: Any = args[0] if args else Any
        plain = value_type is None or value_type is type(None)
        value = TypeAdapter(value_type)
        entries: TypeAdapter[list[tuple[int, str, Any]]] = TypeAdapter(
            list[tuple[int, str, value_type]]
        )

        def validate(data: Any, info: core_schema.ValidationInfo) -> History[Any]:
            if isinstance(data, History):
                return data
            name = info.field_name or "history"
            if isinstance(data, list):  # the inline form of a set: ids only
                if not plain:
                    raise HistoryError(f"{name}: a list where entries with values are stored")
                return cls._inline([(str(key), None) for key in data])
            if not isinstance(data, dict):
                raise HistoryError(f"{name}: not a history")
            if not _is_stored(data):  # the inline form of a map
                return cls._inline([(k, value.validate_python(v)) for k, v in data.items()])
            context = info.context or {}
            loader = context.get(LOAD_CHUNKS)
            if loader is None and context.get(PARTIAL):
                loader = _PARTIAL
            return cls._restore(data, entries, loader, name)

        def serialize(history: History[Any]) -> dict[str, Any]:
            return history._stored()

        return core_schema.with_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                serialize, return_schema=core_schema.any_schema()
            ),
        )


def _count(data: Mapping[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise HistoryError(f"history field {name!r} is {value!r}, not a count")
    return value


def _PARTIAL(name: str) -> bytes | None:
    """The loader of a partial decode: never called (chunks are skipped)."""
    raise AssertionError(name)


_STORED_COUNTS = ("next", "tail_start", "swept", "front")


def _is_stored(data: dict[str, Any]) -> bool:
    """The stored form, told from an inline map (whose values are never bare counts)."""
    return set(data) == {*_STORED_COUNTS, "tail"} and all(
        isinstance(data[name], int) for name in _STORED_COUNTS
    )


_CHUNK_WRITER: TypeAdapter[list[tuple[int, str, Any]]] = TypeAdapter(list[tuple[int, str, Any]])
"""A chunk's entries as JSON arrays of (position, key, value)."""
