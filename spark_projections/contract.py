"""Spark schemas and value checks derived from the pydantic contracts, never written by hand.

Every registered payload type whose fields are all of a kind listed below gets a
:class:`PayloadContract`: its fields in contract order (the order pydantic writes them), a
Spark type per field and a check that accepts a value only where pydantic would accept it
*and* would write it back unchanged. The checks are deliberately sound rather than complete:
a value they cannot vouch for (a float, a dict, a union, an unknown constraint, a model with
a validator, an alias or a configuration that changes values, a decimal written with an
exponent...) makes the record take the exact Python path instead
(:mod:`spark_projections.parse`), so adding a contract can slow the rebuild, never skew it.

Kinds vouched for: ``bool``, ``int``, ``str``, ``Decimal`` and ``Literal`` of strings, with
their ``Annotated``/``Field`` constraints (lengths, bounds, a pattern, digits); optional
(``X | None``) ones; plain models of those (nested objects); and ``tuple[X, ...]`` of any
of them (arrays of strings, of numbers, of models...), each item checked like a field.

Payload fields are parsed into one struct for every type (:func:`payload_schema`), so field
names share one namespace across the contracts: a name two domain events type two ways is
refused when the domains are registered (:mod:`sagas.machinery.payload_fields`) unless a
domain declares it in its ``two_typed_fields``, and then it is parsed as its JSON text and
each reader types it for its own type (:func:`read`), a slower path.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any, Literal, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sagas.domains import DOMAINS  # (importing it registers every contract)
from sagas.machinery.payload_fields import check_payload_fields, domain_events
from sagas.messages import SCHEMA_VERSION, Envelope, Message

Check = Callable[[Column], Column]
"""A predicate on a non-null value: true where pydantic accepts it as written."""

# A decimal pydantic would print back exactly as written (str(Decimal(s)) == s): no
# exponent, no leading zeros, and at most six zeros after "0." (str() switches to an
# exponent below 1E-6).
CANONICAL_DECIMAL = r"^-?([1-9][0-9]*(\.[0-9]+)?|0(\.(0{0,5}[1-9][0-9]*|0{1,6}))?)$"
# Longer decimals go the exact path: casting them natively could overflow DECIMAL(38, x).
MAX_NATIVE_DECIMAL_CHARS = 30


class Unsupported(Exception):
    """A field the native checks cannot vouch for; its type takes the exact Python path."""


@dataclass(frozen=True)
class FieldSpec:
    name: str
    dtype: DataType
    optional: bool
    check: Check
    token: str
    """A regex matching exactly the JSON text pydantic writes for a (non-null) value that
    needs no escape (see :func:`skeleton`)."""

    def when_null(self) -> str:
        return f"(?:{self.token}|null)" if self.optional else self.token


@dataclass(frozen=True)
class PayloadContract:
    type_name: str
    fields: tuple[FieldSpec, ...]


# --- the envelope ----------------------------------------------------------------------

ENVELOPE_FIELDS: tuple[str, ...] = tuple(Envelope.model_fields)
"""The envelope's fields in the order ``Envelope.encode`` writes them."""
assert ENVELOPE_FIELDS[-1] == "payload", "the canonical-text check relies on payload last"

_ENVELOPE_TYPES: dict[str, DataType] = {
    "schema_version": LongType(),
    "sequence": LongType(),
    "definition_version": LongType(),
}


def envelope_schema() -> StructType:
    """The envelope with ``occurred_at`` and ``payload`` kept as text (checked later)."""
    return StructType(
        [StructField(n, _ENVELOPE_TYPES.get(n, StringType())) for n in ENVELOPE_FIELDS]
    )


# --- payload types ---------------------------------------------------------------------


def known_types() -> frozenset[str]:
    return frozenset(Message.known_types())


DOMAIN_EVENTS: tuple[type[Message], ...] = domain_events(DOMAINS)
"""The types worth a native path. Any other type (a command, a tick) on that topic is valid
for the projector too, and takes the exact route."""


@cache
def native_contracts() -> dict[str, PayloadContract]:
    """Every domain-event type the native checks fully cover, by type name."""
    found: dict[str, PayloadContract] = {}
    for model in DOMAIN_EVENTS:
        try:
            found[model.TYPE] = payload_contract(model)
        except Unsupported:
            continue
    return found


def payload_contract(model: type[Message]) -> PayloadContract:
    """``model``'s fields as the native checks read them; raises :class:`Unsupported`."""
    return PayloadContract(model.TYPE, _fields(model))


@cache
def raw_fields() -> frozenset[str]:
    """Field names the domain events type two ways (the domains declare them): parsed as
    JSON text. Every other name has one type in every event, so one Spark type."""
    return check_payload_fields(DOMAINS)


def payload_schema() -> StructType:
    """One struct holding the fields of every native type: a field's Spark type, or its
    JSON text (a string) where types disagree on it (:func:`raw_fields`)."""
    by_name: dict[str, DataType] = {}
    for contract in native_contracts().values():
        for spec in contract.fields:
            raw = spec.name in raw_fields()
            by_name.setdefault(spec.name, StringType() if raw else spec.dtype)
    return StructType([StructField(n, t) for n, t in sorted(by_name.items())])


def read(payload: Column, name: str, dtype: DataType) -> Column:
    """Field ``name`` of a payload parsed with :func:`payload_schema`, as ``dtype`` (the
    type the event's own contract gives it). A field parsed as JSON text is parsed again,
    as ``dtype``; Spark hands a JSON string over as its value and any other token as its
    compact JSON text, so a string field needs no second parse."""
    value = payload[name]
    if name not in raw_fields() or isinstance(dtype, StringType):
        return value
    wrapped = F.concat(F.lit('{"v":'), value, F.lit("}"))
    return F.from_json(wrapped, StructType([StructField("v", dtype)]))["v"]


def read_field(payload: Column, spec: FieldSpec) -> Column:
    return read(payload, spec.name, spec.dtype)


def field_type(type_names: list[str], name: str) -> DataType | None:
    """The Spark type the native contracts of ``type_names`` give field ``name``: None when
    one of them has no native contract, lacks the field or types it differently."""
    natives = native_contracts()
    found = set()
    dtype: DataType | None = None
    for type_name in type_names:
        contract = natives.get(type_name)
        spec = next((f for f in contract.fields if f.name == name), None) if contract else None
        if spec is None:
            return None
        dtype = spec.dtype
        found.add(dtype.json())
    return dtype if len(found) == 1 else None


def _fields(model: type[BaseModel]) -> tuple[FieldSpec, ...]:
    _plain_model(model)
    specs = []
    for name, info in model.model_fields.items():
        _plain_field(model, name, info)
        annotation, optional = _strip_optional(info.annotation)
        dtype, check, token = _kind(annotation, list(info.metadata))
        specs.append(FieldSpec(name, dtype, optional, check, token))
    return tuple(specs)


_PLAIN_CONFIG = frozenset({"frozen", "extra", "title"})
"""Configuration keys that change neither what a model accepts nor what it writes (``extra``:
a skeleton pins every key, so an extra one never takes the native route)."""


def _plain_model(model: type[BaseModel]) -> None:
    """A model whose validation and dump are its fields' and nothing else."""
    decorators = model.__pydantic_decorators__
    custom = [
        decorators.validators,
        decorators.field_validators,
        decorators.root_validators,
        decorators.field_serializers,
        decorators.model_serializers,
        decorators.model_validators,
        decorators.computed_fields,
    ]
    if any(custom):
        raise Unsupported(f"{model.__name__} has validators or serializers")
    if unknown := set(model.model_config) - _PLAIN_CONFIG:
        raise Unsupported(f"{model.__name__} configures {sorted(unknown)}")


def _plain_field(model: type[BaseModel], name: str, info: FieldInfo) -> None:
    """A field read and written under its own name, as its type says."""
    renamed = (info.alias, info.validation_alias, info.serialization_alias, info.discriminator)
    if any(x is not None for x in renamed) or info.exclude:
        raise Unsupported(f"{model.__name__}.{name}: an alias, a discriminator or an exclusion")


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(get_args(annotation)) == 2:
            return args[0], True
        raise Unsupported(f"union {annotation}")
    return annotation, False


def _kind(annotation: Any, metadata: list[Any]) -> tuple[DataType, Check, str]:
    """The Spark type, the check and the JSON token of a (non-null) value of this kind."""
    annotation, metadata = _unwrap(annotation, metadata)
    if annotation is bool:
        return BooleanType(), _no_constraints(metadata), "(?:true|false)"
    if annotation is int:
        return LongType(), _numeric(metadata, lambda c: c), JSON_INT
    if annotation is str:
        return StringType(), _string(metadata), JSON_STRING
    if annotation is Decimal:
        return StringType(), _decimal(metadata), JSON_STRING
    if get_origin(annotation) is Literal:
        values = get_args(annotation)
        if not all(isinstance(v, str) for v in values):
            raise Unsupported(f"literal {annotation}")
        return StringType(), _all(_no_constraints(metadata), lambda c: c.isin(*values)), JSON_STRING
    if get_origin(annotation) is tuple:
        return _array(annotation, metadata)
    if _is_model(annotation):
        _no_constraints(metadata)
        return _object_kind(annotation)
    raise Unsupported(f"type {annotation}")


def _unwrap(annotation: Any, metadata: list[Any]) -> tuple[Any, list[Any]]:
    """``Annotated[X, Field(...), ...]`` as ``X`` and its constraints (pydantic unwraps a
    field's own annotation; an item's or an optional one's is still wrapped)."""
    while get_origin(annotation) is typing.Annotated:
        annotation, *extra = get_args(annotation)
        for m in extra:
            if isinstance(m, FieldInfo):
                if m.alias or m.validation_alias or m.serialization_alias or m.discriminator:
                    raise Unsupported(f"field options {m!r}")
                metadata = [*metadata, *m.metadata]
            else:
                metadata = [*metadata, m]
    return annotation, metadata


def _array(annotation: Any, metadata: list[Any]) -> tuple[DataType, Check, str]:
    """``tuple[X, ...]``: a JSON array, each item a valid X (or null, for ``X | None``)."""
    args = get_args(annotation)
    if len(args) != 2 or args[1] is not Ellipsis:
        raise Unsupported(f"tuple {annotation}")
    item_type, item_optional = _strip_optional(args[0])
    dtype, check, token = _kind(item_type, [])
    item = FieldSpec("item", dtype, item_optional, check, token)
    sized = _sizes(metadata, F.size)
    every: Check = lambda c: sized(c) & F.forall(c, lambda x: value_ok(x, item))  # noqa: E731
    one = item.when_null()
    # Possessive: a roster of 1000 items overflows the stack of Java's backtracking loop;
    # an item ends where the next one starts, so nothing is ever given back anyway.
    return ArrayType(dtype), every, f"\\[(?:{one}(?:,{one})*+)?\\]"


def _object_kind(model: type[BaseModel]) -> tuple[DataType, Check, str]:
    """A (nested) model: a JSON object with exactly its fields, in order."""
    fields = _fields(model)
    dtype = StructType([StructField(f.name, f.dtype) for f in fields])

    def check(c: Column) -> Column:
        checks = [value_ok(c[f.name], f) for f in fields]
        return all_true(checks) if checks else F.lit(True)

    return dtype, check, _object(fields)


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def value_ok(column: Column, spec: FieldSpec) -> Column:
    if spec.optional:
        return column.isNull() | spec.check(column)
    return column.isNotNull() & spec.check(column)


# --- constraint checks -----------------------------------------------------------------


def _no_constraints(metadata: list[Any]) -> Check:
    if metadata:
        raise Unsupported(f"constraints {metadata}")
    return lambda c: F.lit(True)


def _string(metadata: list[Any]) -> Check:
    checks: list[Check] = []
    for m in metadata:
        pattern = _general(m).get("pattern")
        check = _length(m, F.length) or (_matches(pattern) if pattern else None)
        if check is None or (pattern and _general(m).keys() != {"pattern"}):
            raise Unsupported(f"constraint {m!r}")
        checks.append(check)
    return _all(*checks)


def _matches(pattern: str) -> Check:
    whole = _whole_input(pattern)
    return lambda c: c.rlike(whole)


def _length(m: Any, size: Callable[[Column], Column]) -> Check | None:
    if isinstance(m, at.MinLen):
        return lambda c: size(c) >= m.min_length
    if isinstance(m, at.MaxLen):
        return lambda c: size(c) <= m.max_length
    return None


def _whole_input(pattern: str) -> str:
    """Java's ``$`` also matches before a final line break; pydantic's (Rust) does not."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        return pattern[:-1] + "\\z"
    raise Unsupported(f"pattern {pattern!r}")


def _decimal(metadata: list[Any]) -> Check:
    places: dict[str, int] = {}
    bounds = []
    for m in metadata:
        general = _general(m)
        if general and general.keys() <= {"max_digits", "decimal_places"}:
            places.update(general)
        else:
            bounds.append(m)
    return _all(_canonical_decimal, _digits(places), _numeric(bounds, _as_decimal))


def _canonical_decimal(c: Column) -> Column:
    return (F.length(c) <= MAX_NATIVE_DECIMAL_CHARS) & c.rlike(CANONICAL_DECIMAL)


NATIVE_DECIMAL = "decimal(38,10)"
"""What a decimal is compared with its bounds as: 28 whole digits, 10 after the point."""
_NATIVE_WHOLE, _NATIVE_FRACTION = 28, 10


def _as_decimal(c: Column) -> Column:
    """``c`` as :data:`NATIVE_DECIMAL` where that holds it exactly, else null (the check
    then fails and the record takes the exact route): a canonical decimal may have up to 30
    characters, more whole digits than 28 (a cast would overflow: an error under ANSI
    mode, a null without it) or more than 10 after the point (a cast would round, and
    ``100.00000000001`` would pass ``le=100``)."""
    integral, fraction = _parts(c)
    exact = (F.length(integral) <= _NATIVE_WHOLE) & (F.length(fraction) <= _NATIVE_FRACTION)
    return F.when(exact, c.try_cast(NATIVE_DECIMAL))


def _parts(c: Column) -> tuple[Column, Column]:
    """The digits before and after the point of a decimal's text (the latter "" when it
    has none): never an error, whatever the text (``get`` is null past the end, where
    ``getItem`` fails under ANSI mode)."""
    pieces = F.split(F.regexp_replace(c, "^-", ""), r"\.")
    return F.coalesce(F.get(pieces, 0), F.lit("")), F.coalesce(F.get(pieces, 1), F.lit(""))


def _digits(places: dict[str, int]) -> Check:
    """Stricter than pydantic (it ignores trailing zeros), which keeps the check sound."""
    if not places:
        return lambda c: F.lit(True)
    decimals = places.get("decimal_places")
    digits = places.get("max_digits")
    whole = (digits if digits is not None else 10**6) - (decimals or 0)

    def check(c: Column) -> Column:
        integral, fraction = _parts(c)
        ok = F.lit(True)
        if decimals is not None:
            ok = ok & (F.length(fraction) <= F.lit(decimals)) & (F.length(integral) <= whole)
        if digits is not None:
            ok = ok & (F.length(integral) + F.length(fraction) <= digits)
        return ok

    return check


def _numeric(metadata: list[Any], value: Callable[[Column], Column]) -> Check:
    checks = [_bound(m, value) for m in metadata]
    return _all(*checks)


def _bound(m: Any, value: Callable[[Column], Column]) -> Check:
    if isinstance(m, at.Gt):
        return lambda c: value(c) > F.lit(m.gt)
    if isinstance(m, at.Ge):
        return lambda c: value(c) >= F.lit(m.ge)
    if isinstance(m, at.Lt):
        return lambda c: value(c) < F.lit(m.lt)
    if isinstance(m, at.Le):
        return lambda c: value(c) <= F.lit(m.le)
    raise Unsupported(f"constraint {m!r}")


def _sizes(metadata: list[Any], size: Callable[[Column], Column]) -> Check:
    checks = []
    for m in metadata:
        check = _length(m, size)
        if check is None:
            raise Unsupported(f"constraint {m!r}")
        checks.append(check)
    return _all(*checks)


def _general(m: Any) -> dict[str, Any]:
    """The keywords of pydantic's ``_PydanticGeneralMetadata`` (pattern, max_digits...)."""
    if type(m).__name__ != "_PydanticGeneralMetadata":
        return {}
    return {k: v for k, v in vars(m).items() if v is not None}


def _all(*checks: Check) -> Check:
    return lambda c: all_true([check(c) for check in checks])


def all_true(columns: list[Column]) -> Column:
    result = F.lit(True)
    for column in columns:
        result = result & column
    return result


# --- skeletons: the exact text pydantic writes, as a regular expression ------------------

JSON_STRING = r'"[^"\\]*"'
"""A JSON string with no escape (its characters are exactly the value's)."""
JSON_INT = r"-?(?:0|[1-9][0-9]{0,17})"
"""An integer that fits a Spark long."""
UTC_TIME = (
    r'"(?!0000)[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}'
    r'(?:\.(?!000000)[0-9]{6})?Z"'
)
"""A UTC time as pydantic writes it: no fraction when it is zero, else six digits; never in
year 0, which Spark's proleptic calendar takes for a time and Python has not."""
REQUIRED_BY_TRIAGE = frozenset({"entity_type", "sequence"})
"""Optional in the envelope, required of a domain event by the projector's triage."""


def skeleton(type_name: str) -> str:
    """A regex matching exactly the ``Envelope.encode()`` texts of domain events of type
    ``type_name`` whose strings need no escape. A match pins the key order, the token of
    every value (a string where a string belongs...), and leaves no room for whitespace, an
    extra or repeated key, or an omitted field."""
    payload = native_contracts()[type_name]
    members = [_envelope_member(name, type_name) for name in ENVELOPE_FIELDS[:-1]]
    body = "".join(members).removeprefix(",")
    payload_object = _object(payload.fields)
    # \z, not $: Java's $ also matches before a final line break.
    return "^\\{" + body + ',"payload":' + payload_object + "\\}\\z"


def _envelope_member(name: str, type_name: str) -> str:
    info = Envelope.model_fields[name]
    annotation, optional = _strip_optional(info.annotation)
    if name == "type":
        value = '"' + re.escape(type_name) + '"'
    elif name == "schema_version":
        value = str(SCHEMA_VERSION)  # always written (it has a default, never None)
    elif annotation is datetime:
        value = UTC_TIME
    elif annotation is str:
        value = JSON_STRING
    elif annotation is int:
        value = JSON_INT
    else:
        raise Unsupported(f"envelope field {name}: {annotation}")
    member = f',"{name}":{value}'
    if optional and name not in REQUIRED_BY_TRIAGE:
        return f"(?:{member})?"  # Envelope.encode leaves out a None
    return member


def _object(fields: tuple[FieldSpec, ...]) -> str:
    members = ",".join(f'"{spec.name}":{spec.when_null()}' for spec in fields)
    return "\\{" + members + "\\}"
