"""Durable deadlines: the truth is in table state, this is only an index to find them fast.

Deadlines (a reservation's expiry, a saga step's timeout) are stored in each key's record.
A worker keeps a heap of (due time, key) for the partitions it owns: fed by every record it
stores, and rebuilt from its table after each rebalance or restart. A timer pops due keys
and sends a Tick to that key's own topic, so the deadline fires inside the key's stream,
serialized with every other message for it. A stale heap entry costs one no-op tick.

Why the index cannot miss a deadline without any periodic rescan of the tables:

- Every record the worker stores goes through :meth:`DeadlineIndex.schedule` with its next
  deadline, once the write returned (the runner's ``handle_batch``); a record is stored by
  no other path.
- A worker only holds the records of its partitions after a table recovery, and every
  assignment marks the index :attr:`~DeadlineIndex.stale`, so it is rebuilt from the
  recovered tables before the next tick is sent; a rebuild that yields to the loop is
  abandoned and redone if a rebalance starts meanwhile, and keys stored while it scans keep
  the deadline their batch scheduled (the scan may read an older snapshot of them).
- A popped key leaves the index: it comes back when its tick is processed, since a tick is
  never a duplicate (its id derives from the time it was sent) and so always stores the
  key's record, which schedules its remaining deadline. A tick that could not be sent (or
  whose delivery failed) is scheduled again at once (see :meth:`DeadlineIndex.retry`).
- What remains: a tick whose processing raises in a definition, or would send a message
  over SAGALINE_MAX_MESSAGE_BYTES, is dead-lettered and its record not stored. A rescan
  would only fire it again into the same outcome, every pass; the restart that deploys the
  fix rebuilds the index anyway.

So the periodic full rebuild (SAGALINE_DEADLINE_RESCAN_S) is a safety net against a path
this argument overlooks, not part of the design; it is kept, rare by default, and cheap:
records without deadlines are recognized without decoding them
(:meth:`~sagas.machinery.record.Record.surely_without_deadlines`), and the scan yields to
the event loop every few milliseconds (:data:`SLICE_S`), so batches keep flowing while it
runs.
Its default, 600 s, is ten times rarer than the 60 s it replaces: a pass still reads every
record ever written once (finished sagas are never deleted), and a deadline only it would
find fires at most that late: the order of the longest deadlines the definitions set
(a reservation's 5-minute TTL, a participant's 10-minute retention). 0 turns it off.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable, Iterable
from datetime import datetime

YIELD_EVERY = 200
"""Most keys a rebuild reads between two yields to the event loop."""
SLICE_S = 0.005
"""Longest a rebuild holds the loop before it yields, whatever the keys left in its slice:
a record that must be decoded (a hot product with a full window of closed reservations)
costs far more than reading one."""


class DeadlineIndex:
    def __init__(self, rescan_every_s: float = 0.0) -> None:
        self._heap: list[tuple[datetime, str]] = []
        self._scheduled: dict[str, datetime] = {}
        self.stale = True
        """True until rebuilt from the table (at start, and after every rebalance)."""
        self.rescan_every_s = rescan_every_s
        """A periodic full rebuild as well (0: never): a safety net, see the module doc."""
        self._rebuilt_at = float("-inf")
        self._stored_while_scanning: set[str] | None = None
        """During a rebuild: keys scheduled by stored batches, whose index entry is newer
        than what the scan may read of them."""

    def needs_rebuild(self, monotonic_now: float) -> bool:
        if self.stale:
            return True
        return self.rescan_every_s > 0 and monotonic_now - self._rebuilt_at > self.rescan_every_s

    def schedule(self, key: str, due: datetime | None) -> None:
        """``key`` was stored with ``due`` as its next deadline (None: it has none)."""
        if self._stored_while_scanning is not None:
            self._stored_while_scanning.add(key)
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
    ) -> bool:
        """Index ``entries`` (every key of the table) afresh, yielding to the event loop
        every :data:`YIELD_EVERY` keys or :data:`SLICE_S`, whichever comes first. Returns
        False, leaving the index stale, when it stopped because ``interrupted()`` or a new
        :attr:`stale` mark said the table is changing hands (a rebalance): the next rebuild
        starts over."""
        self._heap.clear()
        self._scheduled.clear()
        self.stale = False  # a rebalance during the scan sets it again
        stored = self._stored_while_scanning = set()
        try:
            in_slice, since = 0, time.perf_counter()
            for key, due in entries:
                if key not in stored:
                    self._index(key, due)
                in_slice += 1
                if in_slice == YIELD_EVERY or time.perf_counter() - since > SLICE_S:
                    await asyncio.sleep(0)
                    if self.stale or interrupted():
                        self.stale = True
                        return False
                    in_slice, since = 0, time.perf_counter()
        except BaseException:
            self.stale = True
            raise
        finally:
            self._stored_while_scanning = None
        self._rebuilt_at = monotonic_now
        return True

    def pop_due(self, now: datetime, limit: int = 10_000) -> list[tuple[str, datetime]]:
        """Keys whose earliest deadline is due, with that deadline; each key once."""
        keys: list[tuple[str, datetime]] = []
        while self._heap and self._heap[0][0] <= now and len(keys) < limit:
            due, key = heapq.heappop(self._heap)
            if self._scheduled.get(key) == due:
                del self._scheduled[key]
                keys.append((key, due))
        return keys

    def __len__(self) -> int:
        return len(self._scheduled)
