"""Helpers for the unit tests: envelopes, a driver around ``step`` and a tiny in-memory bus."""

from __future__ import annotations

import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from sagas.catalog import channel as declared_channel
from sagas.contracts.system import Tick
from sagas.machinery.process import Outbound, Process
from sagas.machinery.record import Record
from sagas.machinery.step import EVENTS_CHANNEL, StepResult, step
from sagas.messages import Envelope, Message

T0 = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


class Clock:
    """Seconds (monotonic or wall) that move only when the test moves ``now``."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


_ids = itertools.count(1)


def at(seconds: float) -> datetime:
    """``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def envelope(
    message: Message,
    *,
    key: str,
    message_id: str | None = None,
    saga_id: str | None = None,
    reply_to: str | None = None,
    occurred_at: datetime = T0,
) -> Envelope:
    return Envelope.wrap(
        message,
        message_id=message_id or f"msg-{next(_ids)}",
        key=key,
        occurred_at=occurred_at,
        saga_id=saga_id,
        reply_to=reply_to,
    )


def tick(key: str) -> Envelope:
    return envelope(Tick(), key=key)


@dataclass
class Fed:
    record: Record[Any]
    outbound: list[Outbound]


class Undeclared(AssertionError):
    """A flow routed a message type its definition does not declare (``ACCEPTS``/``FACTS``):
    the AsyncAPI document generated from the declarations would be wrong."""


def check_declared(process: Process[Any], outbound: Iterable[Outbound]) -> None:
    """Every fact ``process`` published is one of its ``FACTS``, and every command or reply
    it sent to a catalog channel is one that channel's definition ``ACCEPTS``."""
    facts = {f.TYPE for f in type(process).FACTS}
    for out in outbound:
        if out.channel == EVENTS_CHANNEL:
            if out.envelope.type not in facts:
                raise Undeclared(f"{process.name} published {out.envelope.type}: not in FACTS")
            continue
        target = declared_channel(out.channel)
        if target is not None and out.envelope.type not in {m.TYPE for m in target.accepts}:
            raise Undeclared(
                f"{process.name} sent {out.envelope.type} to {out.channel}: not in "
                f"{target.definition.__name__}.ACCEPTS"
            )


def feed(
    process: Process[Any],
    envelopes: Iterable[Envelope],
    record: Record[Any] | None = None,
    now: datetime = T0,
) -> Fed:
    """Step every envelope in order; the final record and everything sent on the way."""
    outbound: list[Outbound] = []
    for env in envelopes:
        result = step(process, record, env, now)
        check_declared(process, result.outbound)
        record = kept(record, result)
        outbound.extend(result.outbound)
    assert record is not None, "feed needs at least one envelope"
    return Fed(record, outbound)


def kept(before: Record[Any] | None, result: StepResult) -> Record[Any] | None:
    """What the table holds after ``result``, as the worker stores it: nothing stored for
    an unchanged key, nothing at all for a deleted one."""
    if result.deleted:
        return None
    return result.record if result.changed else before


@dataclass
class Driver:
    """Keeps one key's record between calls to ``step``."""

    process: Process[Any]
    record: Record[Any] | None = None

    def __call__(self, env: Envelope, now: datetime = T0) -> StepResult:
        result = step(self.process, self.record, env, now)
        check_declared(self.process, result.outbound)
        self.record = kept(self.record, result)
        return result

    @property
    def state(self) -> Any:
        assert self.record is not None
        return self.record.state


def commands(outbound: Iterable[Outbound]) -> list[tuple[str, str, str]]:
    """(channel, key, type) of every command or reply, events left out."""
    return [
        (o.channel, o.envelope.key, o.envelope.type)
        for o in outbound
        if o.channel != EVENTS_CHANNEL
    ]


def sent(outbound: Iterable[Outbound]) -> list[Message]:
    """The payloads of every command or reply, events left out."""
    return [o.envelope.message() for o in outbound if o.channel != EVENTS_CHANNEL]


def event_envelopes(outbound: Iterable[Outbound]) -> list[Envelope]:
    return [o.envelope for o in outbound if o.channel == EVENTS_CHANNEL]


def events(outbound: Iterable[Outbound]) -> list[Message]:
    return [e.message() for e in event_envelopes(outbound)]


@dataclass
class Bus:
    """Delivers outbound messages to the process listening on their channel, in order.

    Every envelope and record goes through its wire format, as it would through Kafka and
    the state table. A type a definition does not declare (``ACCEPTS``, ``FACTS``) is refused
    (:class:`Undeclared`): every flow checks the declarations the AsyncAPI document is
    generated from. Channels in ``paused``, and messages ``hold`` picks, are kept until
    :meth:`resume`.
    """

    processes: dict[str, Process[Any]]
    records: dict[tuple[str, str], Record[Any]] = field(default_factory=dict)
    published: list[Envelope] = field(default_factory=list)
    delivered: list[tuple[str, Envelope]] = field(default_factory=list)
    """Every (channel, envelope) delivered to a process, in order."""
    paused: set[str] = field(default_factory=set)
    hold: Callable[[Outbound], bool] | None = None
    _queue: deque[Outbound] = field(default_factory=deque)
    _held: list[Outbound] = field(default_factory=list)
    tables: dict[str, dict[str, bytes]] = field(default_factory=dict)
    """Per channel, what its table holds: records and their histories' chunks."""

    @classmethod
    def of(cls, *processes: Process[Any]) -> Bus:
        return cls({p.name: p for p in processes})

    def send(self, channel: str, env: Envelope, now: datetime = T0) -> None:
        self._queue.append(Outbound(channel, env))
        self.run(now)

    def run(self, now: datetime) -> None:
        while self._queue:
            out = self._queue.popleft()
            env = Envelope.decode(out.envelope.encode())
            if out.channel == EVENTS_CHANNEL:
                self.published.append(env)
            elif out.channel in self.paused or (self.hold is not None and self.hold(out)):
                self._held.append(out)
            else:
                self._deliver(out.channel, env, now)

    def resume(self, channel: str, now: datetime = T0) -> None:
        self.paused.discard(channel)
        held, self._held = self._held, []
        self._queue.extend(held)
        self.run(now)

    def release(self, now: datetime, rng: random.Random | None = None) -> None:
        """Deliver what ``hold`` kept back, shuffled by ``rng``: answers overtake each other."""
        held, self._held = self._held, []
        if rng is not None:
            rng.shuffle(held)
        self._queue.extend(held)
        self.run(now)

    def tick(self, now: datetime) -> None:
        for (channel, key), record in list(self.records.items()):
            due = record.next_deadline()
            if due is not None and due <= now:
                self._queue.append(Outbound(channel, tick(key)))
        self.run(now)

    def state(self, channel: str, key: str) -> Any:
        return self.records[(channel, key)].state

    def _deliver(self, channel: str, env: Envelope, now: datetime) -> None:
        process = self.processes[channel]
        if env.type not in {m.TYPE for m in (*type(process).ACCEPTS, Tick)}:
            raise Undeclared(f"{env.type} delivered to {channel}: not in its ACCEPTS")
        self.delivered.append((channel, env))
        result = step(process, self.records.get((channel, env.key)), env, now)
        check_declared(process, result.outbound)
        if result.changed:  # as the worker stores: nothing for a duplicate or a no-op
            self.store(channel, env.key, result.record)
        self._queue.extend(result.outbound)

    def store(self, channel: str, key: str, record: Record[Any]) -> None:
        """Write ``record`` to the channel's table as the worker would, and keep what a
        read of the table decodes."""
        table = self.tables.setdefault(channel, {})
        stored = self.records.get((channel, key))
        _, writes = record.writes(key, stored)
        for name, value in writes:
            if value is None:
                table.pop(name, None)
            else:
                table[name] = value
        codec = Record.codec(self.processes[channel].state_type)
        self.records[(channel, key)] = codec.decode(key, table[key], table.get)


def ledger_record(
    message: Message,
    key: str,
    offset: int,
    message_id: str | None = None,
    occurred_at: datetime = T0,
) -> Any:
    """The record at ``offset`` of partition 0 of topic ``t.inventory``: a command to the
    inventory ledger for product ``key`` (id ``m<offset>`` unless given), replies to the order
    saga (what the runner tests feed a :class:`~services.worker.runner.ProcessRunner`)."""
    from services.worker.runner import Incoming

    env = Envelope.wrap(
        message,
        message_id=message_id or f"m{offset}",
        key=key,
        saga_id=f"o{offset}",
        reply_to="order-saga",
        occurred_at=occurred_at,
    )
    return Incoming("t.inventory", 0, offset, key.encode(), env.encode())
