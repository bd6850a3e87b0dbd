"""What a saga or participant definition provides, and what it returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from sagas.ids import derive_id
from sagas.messages import Envelope, Message

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True)
class Outbound:
    """A message to send on a logical channel (the services map channels to topics)."""

    channel: str
    envelope: Envelope


@dataclass(frozen=True)
class Command:
    """A command or reply a decision asks to send; the machinery wraps it in an envelope."""

    channel: str
    key: str
    message: Message
    saga_id: str | None = None
    reply_to: str | None = None


@dataclass(frozen=True)
class Fact:
    """An event that names its saga explicitly (when the cause does not carry it)."""

    message: Message
    saga_id: str | None


@dataclass(frozen=True)
class Decision(Generic[S]):
    """The outcome of one message: new state, what to send, what became true."""

    state: S
    send: tuple[Command, ...] = ()
    events: tuple[Message | Fact, ...] = ()
    """Facts about this process's own entity, published to the domain-event topic."""
    set_deadlines: dict[str, datetime] = field(default_factory=dict)
    clear_deadlines: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Context:
    """What a decision may know besides state and message."""

    key: str
    now: datetime
    cause_id: str
    saga_id: str | None = None
    reply_to: str | None = None

    def child_id(self, tag: str) -> str:
        return derive_id(self.cause_id, tag)


def merge(first: Decision[S], then: Decision[S]) -> Decision[S]:
    """Two decisions taken one after the other on the same message, as one."""
    return Decision(
        then.state,
        (*first.send, *then.send),
        (*first.events, *then.events),
        {**first.set_deadlines, **then.set_deadlines},
        (first.clear_deadlines - then.set_deadlines.keys()) | then.clear_deadlines,
    )


class Process(Protocol[S]):
    """A saga or participant definition. Pure: no I/O, no clock, no randomness.

    Besides deciding, a definition declares what travels on its channel and what it
    publishes: the AsyncAPI document (``scripts/export_asyncapi.py``) is generated from these
    declarations, and the unit tests' bus refuses to route a type a definition does not
    declare, so the declaration cannot drift from what ``decide`` really sends.
    """

    ACCEPTS: ClassVar[tuple[type[Message], ...]]
    """Every command and reply its channel carries (besides the machinery's ``system.Tick``),
    whether ``decide`` acts on it or only lets it pass (a late reply)."""
    FACTS: ClassVar[tuple[type[Message], ...]]
    """Every fact it publishes on the domain-event topic about its own entity."""
    KEY: ClassVar[str]
    """What the key of a record on its channel is: the id its state is kept under."""

    @property
    def name(self) -> str:
        """Logical channel this process listens on (``order-saga``, ``inventory``...)."""

    @property
    def entity_type(self) -> str:
        """The kind of entity its key names; its events are published under this type."""

    @property
    def state_type(self) -> type[S]:
        """The frozen model of its per-key state."""

    def initial(self, key: str) -> S: ...

    def decide(self, state: S, message: Message, ctx: Context) -> Decision[S]: ...

    def on_deadline(self, state: S, name: str, ctx: Context) -> Decision[S]: ...
