"""The timeline's ``summary`` column, natively: :func:`sagas.projections.rows.summarize`
as one CASE expression over the parsed payload, generated from the contracts' declared
summaries (:class:`sagas.messages.Summary`).

Each registered type with a ``SUMMARY`` renders its template: the literal parts as
written, ``{field}`` as ``str()`` writes the value (decimals print as written, which is
``str(Decimal)`` for a validated payload; booleans as ``True``/``False``; a null as
``None``), ``{field:count}`` as the number of items; ``then`` instead of ``text`` where the
``when`` field is set (not null, and not false or zero, as Python's truth test reads the
payload). A type without a summary prints its type name, like ``summarize``'s fallback. The
field types come from the native contracts (:mod:`spark_projections.contract`); a type
with a summary but no native contract cannot be rendered here and fails at once. The unit
tests run both on a golden event of every registered type and every branch.
"""

from __future__ import annotations

from decimal import Decimal
from typing import get_args

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BooleanType, DataType, LongType, StringType

from sagas.messages import Message, Summary
from spark_projections import contract


class NoNativeSummary(ValueError):
    """A contract's summary names a field Spark does not parse."""


def summary(type_column: Column, payload: Column) -> Column:
    """The summary of an event of a known type (``type_column`` names it)."""
    natives = contract.native_contracts()
    cases = None
    for type_name, model in sorted(Message.known_types().items()):
        if model.SUMMARY is None:
            continue  # the type name, below
        if type_name not in natives:
            raise NoNativeSummary(
                f"{type_name} has a SUMMARY but no native contract (a field "
                "spark_projections.contract cannot vouch for)"
            )
        line = render(model, payload)
        cases = (F if cases is None else cases).when(type_column == type_name, line)
    if cases is None:
        return type_column
    result: Column = cases.otherwise(type_column)
    return result


def render(model: type[Message], payload: Column) -> Column:
    """``model.SUMMARY`` over ``payload``, a struct holding ``model``'s fields as
    :func:`spark_projections.contract.payload_contract` types them."""
    declared = model.SUMMARY
    if declared is None:
        raise NoNativeSummary(f"{model.__name__} declares no SUMMARY")
    try:
        types = {f.name: f.dtype for f in contract.payload_contract(model).fields}
    except contract.Unsupported as exc:
        raise NoNativeSummary(f"{model.__name__}: {exc}") from None
    text = _template(declared, declared.text, payload, types)
    if declared.when is None or declared.then is None:
        return text
    then = _template(declared, declared.then, payload, types)
    when = contract.read(payload, declared.when, types[declared.when])
    return F.when(_is_set(when, model, declared.when), then).otherwise(text)


def _template(
    declared: Summary, template: str, payload: Column, types: dict[str, DataType]
) -> Column:
    parts: list[Column] = []
    for literal, name, counted in declared.parts(template):
        if literal:
            parts.append(F.lit(literal))
        if name is not None:
            dtype = types[name]
            value = contract.read(payload, name, dtype)
            parts.append(_count(value, dtype) if counted else _str(value, dtype))
    return F.concat(*parts) if parts else F.lit("")


def _count(value: Column, dtype: DataType) -> Column:
    """``str(len(value))``."""
    if isinstance(dtype, ArrayType):
        return F.size(value).cast("string")
    if isinstance(dtype, StringType):
        return F.length(value).cast("string")
    raise NoNativeSummary(f"cannot count a {dtype.simpleString()} natively")


def _str(value: Column, dtype: DataType) -> Column:
    """``str(value)`` as Python writes the validated field."""
    if isinstance(dtype, BooleanType):
        text = F.when(value, F.lit("True")).otherwise(F.lit("False"))
    elif isinstance(dtype, StringType | LongType):
        text = value.cast("string")  # a decimal is its canonical text (the native check)
    else:
        raise NoNativeSummary(f"cannot print a {dtype.simpleString()} as Python does")
    return F.when(value.isNull(), F.lit("None")).otherwise(text)


def _is_set(value: Column, model: type[Message], name: str) -> Column:
    """Python's ``value not in (None, False)``, which also takes 0 and 0.00 as false."""
    annotation = model.model_fields[name].annotation
    args = [a for a in get_args(annotation) if a is not type(None)] or [annotation]
    kind = args[0] if len(args) == 1 else None
    if kind is bool:
        return F.coalesce(value, F.lit(False))
    if kind is int:
        return F.coalesce(value != 0, F.lit(False))
    if kind is Decimal:
        # Zero where every digit is: read from the text pydantic wrote (a cast to double
        # would take 1E-400 for zero, and fail the job under ANSI mode on what is no number).
        return F.coalesce(~value.rlike(ZERO_DECIMAL), F.lit(False))
    return value.isNotNull()


ZERO_DECIMAL = r"^[-+]?(0+\.?0*|\.0+)([eE][-+]?[0-9]+)?$"
"""The texts of a zero decimal (``0``, ``-0.00``, ``0E-7``...)."""
