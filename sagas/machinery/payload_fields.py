"""One payload field name, one type across the domain events, checked when the domains are
registered (:func:`~sagas.machinery.domain.check_domains`).

The Spark rebuild parses the payload of every domain event into one struct, so a field
name has one type in all of them: a second type for a name is refused with both contracts
named, unless a domain declares the name in its ``two_typed_fields`` with the reason (the
rebuild then parses that field as its JSON text and types it per contract, a slower path).
Types are compared as the payload's JSON writes them (:func:`wire_type`): a ``Decimal``
and a ``str`` are both a string there, and share a name.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, get_args, get_origin

from pydantic import BaseModel

from sagas.messages import Message

if TYPE_CHECKING:
    from sagas.machinery.domain import Domain


class ConflictingField(TypeError):
    """One payload field name with two types that no domain declares."""


def domain_events(domains: Iterable[Domain[Any]]) -> tuple[type[Message], ...]:
    """The facts the domains' processes publish on the event topic, as their declarations
    name them: every registered contract of theirs (one with a ``TYPE``) with a timeline
    summary, every type (or subtype) a read model reads, and every saga's status event;
    sorted by type name."""
    domains = tuple(domains)
    named: set[type[Message]] = set()
    for domain in domains:
        for model in domain.read_models:
            named |= model.event_types()
        named |= {saga.statuses.event for saga in domain.saga_types}
    found = {
        m
        for m in _contracts(domains)
        if m.SUMMARY is not None or any(issubclass(m, base) for base in named)
    }
    return tuple(sorted(found, key=lambda m: m.TYPE))


def _contracts(domains: Iterable[Domain[Any]]) -> set[type[Message]]:
    found: set[type[Message]] = set()
    for domain in domains:
        for module in domain.contracts:
            found |= {
                v
                for v in vars(module).values()
                if isinstance(v, type) and issubclass(v, Message) and v.TYPE
            }
        for channel in domain.channels:
            found |= {*channel.accepts, *channel.facts}
    return found


def check_payload_fields(domains: Iterable[Domain[Any]]) -> frozenset[str]:
    """The field names the domains declare two-typed; refuses (:class:`ConflictingField`)
    any other name their events type two ways, and a declared one they do not."""
    domains = tuple(domains)
    declared = {name: why for d in domains for name, why in d.two_typed_fields.items()}
    return two_typed(domain_events(domains), declared)


def two_typed(events: Iterable[type[Message]], declared: Mapping[str, str]) -> frozenset[str]:
    """The field names ``events`` give two types, each in ``declared``; raises
    :class:`ConflictingField` on one that is not, and on a declared name no two events type
    differently (it would take the slow path for nothing)."""
    first: dict[str, tuple[type[Message], str]] = {}
    found: set[str] = set()
    for event in events:
        for name, info in event.model_fields.items():
            wire = wire_type(info.annotation)
            seen = first.setdefault(name, (event, wire))
            if seen[1] == wire:
                continue
            if name not in declared:
                raise ConflictingField(_conflict(name, seen, (event, wire)))
            found.add(name)
    if stale := sorted(set(declared) - found):
        raise ConflictingField(
            f"two_typed_fields declares {stale}, which no two contracts type differently: "
            "remove them, the Spark rebuild would parse them as JSON text for nothing"
        )
    return frozenset(found)


def wire_type(annotation: Any) -> str:
    """How the payload's JSON writes a value of this type: ``boolean``, ``integer``,
    ``string`` (``str``, ``Decimal``, a ``Literal`` of strings), ``array<item>``
    (``tuple[X, ...]``), ``object<name: type, ...>`` (a model, its fields in order); any
    other type by its name. ``None`` (an optional value) does not count."""
    while get_origin(annotation) is typing.Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (typing.Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return " | ".join(wire_type(a) for a in members)
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    if annotation in (str, Decimal) or _string_literal(annotation):
        return "string"
    args = get_args(annotation)
    if get_origin(annotation) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"array<{wire_type(args[0])}>"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        fields = (f"{n}: {wire_type(f.annotation)}" for n, f in annotation.model_fields.items())
        return f"object<{', '.join(fields)}>"
    return _name(annotation)


def _string_literal(annotation: Any) -> bool:
    return get_origin(annotation) is Literal and all(
        isinstance(v, str) for v in get_args(annotation)
    )


def _conflict(name: str, *declared: tuple[type[Message], str]) -> str:
    types_ = " and ".join(
        f"{_name(event.model_fields[name].annotation)} in {event.TYPE or event.__name__} ({wire})"
        for event, wire in declared
    )
    return (
        f"payload field {name!r} has two types: {types_}. The Spark rebuild parses every "
        "domain event's fields into one struct, so a name has one type across the contracts: "
        "rename one of the fields, or, if both must keep the name, declare it in the "
        "two_typed_fields of the domain that needs it, with the reason (it is then parsed "
        "as JSON text, a slower path)"
    )


def _name(annotation: Any) -> str:
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:[a-z_]\w*\.)+", "", text)  # without module paths
