"""Waiting until the read models have caught up: with a write (a consistency token) or with
a saga's settled status (no outcome pending: a final one, or one it rests in between
commands, as its type declares).

One poller per API process asks the database, every ``interval`` and only while somebody
waits, which of the awaited things have arrived: a single query for any number of waiters.
Each awaited thing has one slot (an :class:`asyncio.Event` and a count of waiters); a
waiter leaves its slot in ``finally``, so a timeout or a client that hangs up leaves
nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import Engine

from readside import queries
from sagas.catalog import saga_type_of

log = logging.getLogger(__name__)

Kind = Literal["receipt", "settled"]


@dataclass(frozen=True)
class Arrived:
    receipts: frozenset[str] = frozenset()
    """Consistency tokens whose command the projector has applied."""
    settled: frozenset[str] = frozenset()
    """Saga keys (``<saga entity type>:<saga id>``) whose saga is in a settled status."""


Probe = Callable[[frozenset[str], frozenset[str]], Arrived]
"""(awaited tokens, awaited saga keys) -> what has arrived; blocking, so it runs in a thread."""


@dataclass
class _Slot:
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: int = 0


class ReadWatch:
    def __init__(self, probe: Probe, interval_s: float = 0.05) -> None:
        self._probe = probe
        self._interval = interval_s
        self._slots: dict[tuple[Kind, str], _Slot] = {}
        self._someone_waits = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="read-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def open_slots(self) -> int:
        """Things somebody waits for right now (0 when nobody waits: nothing leaks)."""
        return len(self._slots)

    async def receipt(self, token: str, timeout: float) -> bool:
        """True once the command behind ``token`` is applied; False after ``timeout`` s."""
        return await self._wait("receipt", token, timeout)

    async def settled(self, saga_key: str, timeout: float) -> bool:
        """True once the saga ``saga_key`` (``<saga entity type>:<saga id>``, e.g.
        ``order:o-1``) is in one of its settled statuses (for an order: a final one);
        False after ``timeout`` s."""
        return await self._wait("settled", saga_key, timeout)

    async def _wait(self, kind: Kind, ident: str, timeout: float) -> bool:
        key = (kind, ident)
        slot = self._slots.setdefault(key, _Slot())
        slot.waiters += 1
        self._someone_waits.set()
        try:
            async with asyncio.timeout(max(timeout, 0)):
                await slot.arrived.wait()
            return True
        except TimeoutError:
            return False
        finally:
            slot.waiters -= 1
            if slot.waiters == 0:
                del self._slots[key]

    async def _poll(self) -> None:
        while True:
            await self._someone_waits.wait()
            if not self._slots:
                self._someone_waits.clear()
                continue
            await self._check_once()
            await asyncio.sleep(self._interval)

    async def _check_once(self) -> None:
        pending = [key for key, slot in self._slots.items() if not slot.arrived.is_set()]
        tokens = frozenset(i for kind, i in pending if kind == "receipt")
        sagas = frozenset(i for kind, i in pending if kind == "settled")
        if not tokens and not sagas:
            return
        try:
            arrived = await asyncio.to_thread(self._probe, tokens, sagas)
        except Exception:  # the database may be briefly away: waiters time out, we go on
            log.warning("read watch: could not check the read models", exc_info=True)
            return
        keys: list[tuple[Kind, str]] = [("receipt", t) for t in arrived.receipts]
        keys += [("settled", o) for o in arrived.settled]
        for key in keys:
            if (slot := self._slots.get(key)) is not None:
                slot.arrived.set()


def database_probe(engine: Engine) -> Probe:
    """A :data:`Probe` that asks the read-model database: receipts, and the statuses of the
    awaited sagas, each type in its own read model with its own settled statuses."""

    def probe(tokens: frozenset[str], saga_keys: frozenset[str]) -> Arrived:
        by_type: dict[str, set[str]] = defaultdict(set)
        for key in saga_keys:
            saga_type, _, saga_id = key.partition(":")
            by_type[saga_type].add(saga_id)
        settled: set[str] = set()
        with engine.connect() as conn:
            receipts = queries.receipts_among(conn, tokens)
            for saga_type, ids in by_type.items():
                if (saga := saga_type_of(saga_type)) is not None:
                    found = queries.settled_among(conn, saga, ids)
                    settled.update(f"{saga_type}:{i}" for i in found)
        return Arrived(receipts=frozenset(receipts), settled=frozenset(settled))

    return probe
