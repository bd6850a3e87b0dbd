"""Durable deadlines: the truth is in table state, this is only an index to find them fast.

Deadlines (a reservation's expiry, a saga step's timeout, a finished record's retirement)
are stored in each key's record. Beside the records, each table partition holds an *index
entry* per key that has a deadline: an empty value under :func:`entry_key` (its next
deadline, then its key), so that the partition's entries sort by due time. A worker keeps a
heap of (due time, key) for the partitions it owns, of the entries due within
:attr:`DeadlineIndex.horizon`: fed by every record it stores, rebuilt after each rebalance
or restart by reading the table's entries due within the horizon, and extended as time
passes by reading the next slice of them (:meth:`DeadlineIndex.extend`). A timer pops due
keys and sends a Tick to that key's own topic, so the deadline fires inside the key's
stream, serialized with every other message for it. A stale heap entry costs one no-op tick.

So a rebuild reads what is due soon, never the records: not the finished sagas within
their retention, not the markers of retired ones (their deadlines are an hour or a day
away), and not the records without deadlines (issue 25: the rebuild read every record
ever written; 655k per saga table after 30 minutes of the soak).

Why an index entry is there for every stored record's deadline, whatever a crash cuts: a
key's batch writes the entry of its new next deadline before its record, and deletes the
entry of its old one after it (:meth:`~services.worker.runner.ProcessRunner`'s state
writes, one changelog partition, in order). Cut anywhere, the record the table holds has
its entry; at worst an entry of the other record is left over, which costs a tick that
fires nothing, and is deleted when that key is next written after its tick
(:attr:`DeadlineIndex.fired`). A partition written by a version without entries has no
flag (:func:`indexed_key`): its first rebuild reads its records once, writes the entries
they lack and then the flag (:meth:`~services.worker.runner.ProcessRunner.rebuild_deadlines`).

Why the heap cannot miss a deadline without any periodic rescan:

- Every record the worker stores goes through :meth:`DeadlineIndex.schedule` with its next
  deadline, once the write returned (the runner's ``handle_batch``); a record is stored by
  no other path. A deadline beyond the horizon is left to the table's entry.
- A worker only holds the records of its partitions after a table recovery, and every
  assignment marks the index :attr:`~DeadlineIndex.stale`, so it is rebuilt from the
  recovered tables' entries before the next tick is sent; a rebuild that yields to the loop
  is abandoned and redone if a rebalance starts meanwhile, and keys stored while it reads
  keep the deadline their batch scheduled (the read may see an older snapshot of them).
  The new heap is built beside the old one and swapped in whole: ticks keep flowing from
  the old one meanwhile.
- An extension moves :attr:`~DeadlineIndex.loaded_until` first and then reads the entries
  up to it: a batch that stores a key meanwhile schedules it (it is within the new bound).
- A popped key leaves the heap: it comes back when its tick is processed, since a tick is
  never a duplicate (its id derives from the time it was sent) and so always stores the
  key's record, which schedules its remaining deadline. A tick that could not be sent (or
  whose delivery failed) is scheduled again at once (see :meth:`DeadlineIndex.retry`).
- What remains: a tick whose processing raises in a definition, or would send a message
  over SAGALINE_MAX_MESSAGE_BYTES, is dead-lettered and its record not stored. A rescan
  would only fire it again into the same outcome, every pass; the restart that deploys the
  fix rebuilds the index anyway.

The periodic rebuild (SAGALINE_DEADLINE_RESCAN_S) is kept, paced, as a safety net against
a path this argument overlooks: it now reads the index entries due within the horizon
(the live work), not every record, so its cost no longer grows with the history; its
default stays 600 s, and 0 turns it off.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

YIELD_EVERY = 200
"""Most keys a rebuild reads between two yields to the event loop."""
SLICE_S = 0.005
"""Longest a rebuild holds the loop before it yields, whatever the keys left in its slice:
a record that must be decoded (a hot product with a full window of closed reservations)
costs far more than reading one."""
HORIZON = timedelta(minutes=1)
"""How far ahead of now the heap holds deadlines; later ones stay in the table's entries
until an extension reads them (half a horizon before they are due)."""

DEADLINE_KEY_PREFIX = "\x00deadline/"
"""Table keys of index entries. No entity key starts with a control character (envelope
keys are printable), so none collides; the worker's table scans leave them out."""
INDEXED_KEY_PREFIX = "\x00deadline-index/"
_DUE = "%Y-%m-%dT%H:%M:%S.%f"
_DUE_LENGTH = 26


def entry_key(key: str, due: datetime) -> str:
    """The table key of ``key``'s index entry for its next deadline ``due``: sorted by due
    time (a fixed-width UTC timestamp), then by key."""
    return f"{DEADLINE_KEY_PREFIX}{_due_text(due)}/{key}"


def entries_until(due: datetime) -> tuple[str, str]:
    """The range [start, stop) of the entry keys due at or before ``due`` ("0" sorts right
    after the "/" that ends every due time)."""
    return DEADLINE_KEY_PREFIX, f"{DEADLINE_KEY_PREFIX}{_due_text(due)}0"


def parse_entry(table_key: str) -> tuple[str, datetime]:
    """(key, due) of an index entry's table key."""
    rest = table_key[len(DEADLINE_KEY_PREFIX) :]
    due = datetime.strptime(rest[:_DUE_LENGTH], _DUE).replace(tzinfo=UTC)
    return rest[_DUE_LENGTH + 1 :], due


def indexed_key(partition: int) -> str:
    """The flag a table partition holds once every record's deadline there has its entry."""
    return f"{INDEXED_KEY_PREFIX}{partition}"


def _due_text(due: datetime) -> str:
    return due.astimezone(UTC).strftime(_DUE)


class DeadlineIndex:
    def __init__(self, rescan_every_s: float = 0.0, horizon: timedelta | None = None) -> None:
        self._heap: list[tuple[datetime, str]] = []
        self._scheduled: dict[str, datetime] = {}
        self.stale = True
        """True until rebuilt from the table (at start, and after every rebalance)."""
        self.rescan_every_s = rescan_every_s
        """A periodic rebuild as well (0: never): a safety net, see the module doc."""
        self.horizon = horizon
        """How far ahead the heap holds deadlines (None: all it is given)."""
        self.loaded_until: datetime | None = None
        """The heap holds every deadline due up to here (None: every one)."""
        self.fired: dict[str, datetime] = {}
        """Keys popped for a tick, with the deadline they were popped for: the entry of
        that deadline, if the key's next write no longer needs it, is deleted then."""
        self._rebuilt_at = float("-inf")
        self._stored_while_scanning: set[str] | None = None
        """During a rebuild or extension: keys scheduled by stored batches, whose index
        entry is newer than what the read may see of them."""

    def needs_rebuild(self, monotonic_now: float) -> bool:
        if self.stale:
            return True
        return self.rescan_every_s > 0 and monotonic_now - self._rebuilt_at > self.rescan_every_s

    def needs_extension(self, now: datetime) -> bool:
        """Half a horizon is left of what the heap holds: read the next slice."""
        if self.loaded_until is None or self.horizon is None:
            return False
        return now + self.horizon / 2 > self.loaded_until

    def schedule(self, key: str, due: datetime | None) -> None:
        """``key`` was stored with ``due`` as its next deadline (None: it has none). One
        beyond what the heap holds is left to the table's entry (an extension reads it)."""
        if self._stored_while_scanning is not None:
            self._stored_while_scanning.add(key)
        if due is not None and self.loaded_until is not None and due > self.loaded_until:
            due = None
        self._index(key, due)

    def retry(self, key: str, due: datetime) -> None:
        """``key``'s tick was not sent: keep it due (it is still in the key's record)."""
        if key not in self._scheduled:
            self._index(key, due)

    def _index(self, key: str, due: datetime | None) -> None:
        if due is None:
            self._scheduled.pop(key, None)
            return
        if self._scheduled.get(key) == due:
            return
        self._scheduled[key] = due
        heapq.heappush(self._heap, (due, key))

    async def rebuild(
        self,
        entries: Iterable[tuple[str, datetime | None]],
        monotonic_now: float,
        interrupted: Callable[[], bool] = lambda: False,
        until: datetime | None = None,
    ) -> bool:
        """Index ``entries`` (every deadline of the table due up to ``until``; None: all of
        them) afresh, beside the current index, which keeps serving :meth:`pop_due`
        meanwhile, and swap it in at the end. Yields to the event loop every
        :data:`YIELD_EVERY` entries or :data:`SLICE_S`, whichever comes first. Returns
        False, leaving the index stale, when it stopped because ``interrupted()`` or a new
        :attr:`stale` mark said the table is changing hands (a rebalance): the next rebuild
        starts over."""
        self.stale = False  # a rebalance during the scan sets it again
        self.loaded_until = until
        fresh: dict[str, datetime] = {}
        stored = self._stored_while_scanning = set()
        try:
            if not await self._read(entries, fresh, interrupted):
                return False
        except BaseException:
            self.stale = True
            raise
        finally:
            self._stored_while_scanning = None
        for key in stored:  # what their batches scheduled is newer than what was read
            fresh.pop(key, None)
            if (due := self._scheduled.get(key)) is not None:
                fresh[key] = due
        self._scheduled = fresh
        self._heap = [(due, key) for key, due in fresh.items()]
        heapq.heapify(self._heap)
        self.fired.clear()
        self._rebuilt_at = monotonic_now
        return True

    async def extend(
        self,
        entries: Callable[[datetime, datetime], Iterable[tuple[str, datetime | None]]],
        until: datetime,
        interrupted: Callable[[], bool] = lambda: False,
    ) -> bool:
        """Hold the deadlines due up to ``until`` as well: those ``entries(after, until)``
        reads from the table beyond what the heap held. The bound moves first, so what a
        batch stores meanwhile is scheduled by the batch."""
        after = self.loaded_until
        if after is None or until <= after:
            return True
        self.loaded_until = until
        read: dict[str, datetime] = {}
        stored = self._stored_while_scanning = set()
        try:
            done = await self._read(entries(after, until), read, interrupted)
        finally:
            self._stored_while_scanning = None
        if not done:
            self.stale = True
            return False
        for key, due in read.items():
            if key not in stored and key not in self._scheduled:
                self._index(key, due)
        return True

    async def _read(
        self,
        entries: Iterable[tuple[str, datetime | None]],
        into: dict[str, datetime],
        interrupted: Callable[[], bool],
    ) -> bool:
        """Read ``entries`` into ``into`` (a key read twice keeps its earliest deadline: a
        left-over entry costs a tick, never a late one), yielding to the loop in slices.
        False: a rebalance interrupted it (the index is then stale)."""
        in_slice, since = 0, time.perf_counter()
        for key, due in entries:
            if due is not None:
                known = into.get(key)
                if known is None or due < known:
                    into[key] = due
            in_slice += 1
            if in_slice == YIELD_EVERY or time.perf_counter() - since > SLICE_S:
                await asyncio.sleep(0)
                if self.stale or interrupted():
                    self.stale = True
                    return False
                in_slice, since = 0, time.perf_counter()
        return True

    def pop_due(self, now: datetime, limit: int = 10_000) -> list[tuple[str, datetime]]:
        """Keys whose earliest deadline is due, with that deadline; each key once."""
        keys: list[tuple[str, datetime]] = []
        while self._heap and self._heap[0][0] <= now and len(keys) < limit:
            due, key = heapq.heappop(self._heap)
            if self._scheduled.get(key) == due:
                del self._scheduled[key]
                self.fired[key] = due
                keys.append((key, due))
        return keys

    def __len__(self) -> int:
        return len(self._scheduled)
