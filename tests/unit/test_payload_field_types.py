"""One payload field name, one Spark type across the contracts: the rebuild parses every
contract's fields into one struct, so a second type for a name is refused where the Spark
contract is derived, unless declared (then that name takes the slower JSON-text path)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pyspark.sql.types import StringType

from sagas.messages import Message
from spark_projections.contract import (
    JSON_TEXT_FIELDS,
    ConflictingField,
    conflicting_fields,
    payload_schema,
)

pytestmark = pytest.mark.unit


# Without a TYPE these contracts stay out of the registry (and out of every other test).
class FundsHeld(Message):
    account_id: str
    held: Decimal


class SeatsHeld(Message):
    held: int


class NoteHeld(Message):
    held: str


def test_one_field_name_with_two_types_is_refused_naming_both_contracts_and_what_to_do() -> None:
    """A newcomer's Decimal ``held`` beside the course's int ``held`` once moved both to the
    JSON-text path without a word."""
    with pytest.raises(ConflictingField) as caught:
        conflicting_fields([FundsHeld, SeatsHeld], {})
    assert str(caught.value).startswith(
        "payload field 'held' has two types: Decimal in FundsHeld (Spark string) and int in "
        "SeatsHeld (Spark bigint)."
    )
    assert "rename one of the fields, or" in str(caught.value)
    assert "declare it in JSON_TEXT_FIELDS (spark_projections/contract.py)" in str(caught.value)


def test_a_declared_name_takes_the_json_text_path_and_a_stale_declaration_is_refused() -> None:
    assert conflicting_fields([FundsHeld, SeatsHeld], {"held": "why"}) == {"held"}
    with pytest.raises(ConflictingField, match=r"declares \['held'\], which no two contracts"):
        conflicting_fields([FundsHeld, NoteHeld], {"held": "why"})


def test_two_python_types_the_parse_reads_alike_share_a_name() -> None:
    assert conflicting_fields([FundsHeld, NoteHeld], {}) == frozenset()  # both a string


def test_the_repository_s_contracts_type_each_name_once_but_the_declared_waitlist() -> None:
    schema = payload_schema()
    for name in JSON_TEXT_FIELDS:
        assert schema[name].dataType == StringType()
