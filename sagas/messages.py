"""The envelope every Sagaline message travels in, and the registry of payload types.

One envelope for commands, replies and domain events. Payload models subclass
:class:`Message` and declare a unique ``TYPE``; the registry maps a type name back to its
model so a record read from Kafka is validated against exactly one contract.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from sagas.untrusted import ContractError, bounded, parse_object

SCHEMA_VERSION = 1
MAX_KEY_LENGTH = 200
"""Longest envelope key: it becomes a table key and an ``entity_key`` column (200)."""

__all__ = ["SCHEMA_VERSION", "ContractError", "Envelope", "Message", "Summary"]

_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)(:count)?\}")


@dataclass(frozen=True)
class Summary:
    """The line a saga's timeline shows for a domain event, declared on its contract.

    ``text`` names payload fields as ``{field}`` (the value as ``str()`` writes it) or
    ``{field:count}`` (the number of items). When ``when`` names a field that is set (not
    null, not false), ``then`` is used instead. The Spark rebuild renders the same
    templates natively (``spark_projections/summary.py``), so a new contract needs no code
    on either side.
    """

    text: str
    when: str | None = None
    then: str | None = None

    def __post_init__(self) -> None:
        if (self.when is None) != (self.then is None):
            raise ValueError("a summary's `when` and `then` go together")

    def parts(self, template: str) -> list[tuple[str, str | None, bool]]:
        """``template`` as (literal text, field or None, counted) pieces, in order."""
        pieces: list[tuple[str, str | None, bool]] = []
        at = 0
        for match in _PLACEHOLDER.finditer(template):
            pieces.append((template[at : match.start()], match.group(1), bool(match.group(2))))
            at = match.end()
        pieces.append((template[at:], None, False))
        return pieces

    def fields(self) -> set[str]:
        named = {f for t in (self.text, self.then or "") for _, f, _ in self.parts(t) if f}
        return named | ({self.when} if self.when else set())

    def render(self, message: Message) -> str:
        chosen = self.text
        if self.when is not None and getattr(message, self.when) not in (None, False):
            chosen = self.then or self.text
        out = []
        for literal, name, counted in self.parts(chosen):
            out.append(literal)
            if name is not None:
                value = getattr(message, name)
                out.append(str(len(value)) if counted else str(value))
        return "".join(out)


class Message(BaseModel):
    """A payload contract. Subclasses set ``TYPE`` (e.g. ``"ledger.Reserve"``); a domain
    event also sets ``SUMMARY``, its line in a saga's timeline (without one, the timeline
    shows the type name), and ``COMPENSATION`` when it undoes an earlier step (the console
    marks those steps)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    TYPE: ClassVar[str] = ""
    SUMMARY: ClassVar[Summary | None] = None
    COMPENSATION: ClassVar[bool] = False
    _registry: ClassVar[dict[str, type[Message]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.TYPE:
            if cls.TYPE in Message._registry:
                raise TypeError(f"message type {cls.TYPE!r} is declared twice")
            Message._registry[cls.TYPE] = cls

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        # Called once pydantic has built the fields (``__init_subclass__`` is too early).
        super().__pydantic_init_subclass__(**kwargs)
        if cls.SUMMARY is not None and (unknown := cls.SUMMARY.fields() - set(cls.model_fields)):
            raise TypeError(f"{cls.__name__}.SUMMARY names unknown fields {sorted(unknown)}")

    @classmethod
    def model_for(cls, type_name: str) -> type[Message]:
        try:
            return Message._registry[type_name]
        except KeyError:
            raise ContractError(f"unknown message type {bounded(type_name, 100)!r}") from None

    @classmethod
    def known_types(cls) -> dict[str, type[Message]]:
        return dict(Message._registry)


class Envelope(BaseModel):
    """Metadata common to every message, and the payload as validated JSON.

    It is the whole Kafka record value (UTF-8 JSON; fields that are null are left out). The
    only Kafka headers Sagaline sets are W3C trace context (``traceparent``, ``tracestate``)
    when tracing is on; nothing is decided on them."""

    # The attribute docstrings become the schema's descriptions (contracts/, AsyncAPI).
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    message_id: str
    """Unique per message: a record whose id its key has seen recently (the last
    ``SAGALINE_SEEN_WINDOW``) is a duplicate and is dropped, so a retry reuses the id."""
    type: str
    """The contract of ``payload`` (``order.Place``, ``ledger.Reserved``...)."""
    schema_version: int = SCHEMA_VERSION
    """A version newer than the reader's is refused (dead-lettered)."""
    key: str
    """The partition key: the id of the entity (or saga) whose agent must handle it. The
    Kafka record's key is the same text (UTF-8)."""
    saga_id: str | None = None
    """Correlation id: the saga this message belongs to."""
    causation_id: str | None = None
    """The message that caused this one."""
    reply_to: str | None = None
    """Logical channel a participant answers on (commands only)."""
    occurred_at: datetime
    """When it was sent (ISO 8601 with a UTC offset)."""
    entity_type: str | None = None
    """Domain events only: the kind of entity ``key`` names (``order``, ``product``...)."""
    sequence: int | None = None
    """Domain events only: 1, 2, 3... per entity, with no gaps."""
    definition_version: int | None = None
    """Domain events only: the version of the definition whose instance published it
    (``sagas/machinery/versions.py``). Left out by an unversioned definition, and absent
    from every event recorded before it was written: both mean version 1."""
    payload: dict[str, Any]
    """The message itself: the JSON Schema of ``type`` (``contracts/<type>.json``)."""

    @field_validator("key")
    @classmethod
    def _key_fits_a_table(cls, key: str) -> str:
        # A key becomes a table key, a partition key and a column value: a hostile one
        # (empty, a megabyte, control characters) is refused here, before it gets there.
        if not key:
            raise ValueError("must not be empty")
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"has {len(key)} characters, at most {MAX_KEY_LENGTH} allowed")
        if not key.isprintable():
            raise ValueError("has control characters")
        return key

    def message(self) -> Message:
        """The payload validated against its contract; raises :class:`ContractError`."""
        model = Message.model_for(self.type)
        try:
            return model.model_validate(self.payload)
        except ValidationError as exc:
            raise ContractError(f"{bounded(self.type, 100)}: {_describe(exc)}") from None

    def encode(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def decode(cls, raw: bytes | str | None) -> Envelope:
        """Parse a Kafka record value; raises :class:`ContractError` with a readable reason."""
        data = parse_object(raw)
        try:
            envelope = cls.model_validate(data)
        except ValidationError as exc:
            raise ContractError(f"bad envelope: {_describe(exc)}") from None
        if envelope.schema_version > SCHEMA_VERSION:
            raise ContractError(
                f"schema version {envelope.schema_version} is newer than {SCHEMA_VERSION}"
            )
        return envelope

    @classmethod
    def wrap(
        cls,
        message: Message,
        *,
        message_id: str,
        key: str,
        occurred_at: datetime,
        saga_id: str | None = None,
        causation_id: str | None = None,
        reply_to: str | None = None,
        entity_type: str | None = None,
        sequence: int | None = None,
        definition_version: int | None = None,
    ) -> Envelope:
        return cls(
            message_id=message_id,
            type=message.TYPE,
            key=key,
            saga_id=saga_id,
            causation_id=causation_id,
            reply_to=reply_to,
            occurred_at=occurred_at,
            entity_type=entity_type,
            sequence=sequence,
            definition_version=definition_version,
            payload=message.model_dump(mode="json"),
        )


def _describe(exc: ValidationError) -> str:
    """A one-line, human-readable list of what is wrong (bounded: a hostile record's field
    names and messages must not fill a dead letter)."""
    parts = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(bounded(str(p), 40) for p in err["loc"]) or "value"
        parts.append(f"{where}: {bounded(err['msg'], 120)}")
    return bounded("; ".join(parts))
