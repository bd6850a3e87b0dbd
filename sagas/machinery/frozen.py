"""Changing a frozen model: a copy whose changed field names are checked.

pydantic's ``model_copy(update=...)`` takes any key silently: a mistyped name is kept beside
the fields and the field meant stays as it was. Every state change in the core goes through
:func:`checked_copy` (or, for the kit's small states, :func:`validated_copy`) instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def checked_copy(model: M, changes: Mapping[str, object]) -> M:
    """``model`` with ``changes``, refused (a TypeError) for a field it does not have. The
    values are taken as given, as ``model_copy`` takes them: a state holding a thousand
    reservations is not validated again to change one total."""
    _refuse_unknown(model, changes)
    return model.model_copy(update=changes)


def validated_copy(model: M, changes: Mapping[str, object]) -> M:
    """``model`` with ``changes``, refused for a field it does not have and validated like a
    new instance (a value of the wrong type is a ValidationError). For small models: every
    field is validated again, the unchanged ones too."""
    _refuse_unknown(model, changes)
    return type(model).model_validate({**model.__dict__, **changes})


def _refuse_unknown(model: BaseModel, changes: Mapping[str, object]) -> None:
    unknown = changes.keys() - type(model).model_fields.keys()
    if unknown:
        raise TypeError(f"{type(model).__name__} has no field {', '.join(sorted(unknown))}")
