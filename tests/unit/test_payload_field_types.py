"""One payload field name, one type across the domain events, refused when the domains are
registered (sagas/machinery/payload_fields.py): the Spark rebuild parses every event's fields
into one struct, so a second type for a name is refused naming both contracts, unless a
domain declares it (then that name takes the slower JSON-text path)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from types import ModuleType
from typing import Any, Literal

import pytest
from pyspark.sql.types import StringType

from sagas.domains import DOMAINS
from sagas.domains import enrollment as enrollment_domain
from sagas.machinery.domain import Domain, check_domains
from sagas.machinery.payload_fields import ConflictingField, two_typed, wire_type
from sagas.messages import Message, Summary
from spark_projections.contract import payload_schema, raw_fields

pytestmark = pytest.mark.unit


# Without a TYPE these contracts stay out of the registry (and out of every other test).
class FundsHeld(Message):
    account_id: str
    held: Decimal


class SeatsHeld(Message):
    held: int


class NoteHeld(Message):
    held: str | None = None


def test_one_field_name_with_two_types_is_refused_naming_both_contracts_and_what_to_do() -> None:
    """A newcomer's Decimal ``held`` beside the course's int ``held`` once moved both to the
    JSON-text path without a word."""
    with pytest.raises(ConflictingField) as caught:
        two_typed([FundsHeld, SeatsHeld], {})
    assert str(caught.value) == (
        "payload field 'held' has two types: Decimal in FundsHeld (string) and int in "
        "SeatsHeld (integer). The Spark rebuild parses every domain event's fields into one "
        "struct, so a name has one type across the contracts: rename one of the fields, or, "
        "if both must keep the name, declare it in the two_typed_fields of the domain that "
        "needs it, with the reason (it is then parsed as JSON text, a slower path)"
    )


def test_a_domain_whose_event_retypes_a_field_is_refused_when_it_is_registered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Message, "_registry", Message.known_types())  # registered for this test
    contracts = ModuleType("funds_contracts")

    class FundsSet(Message):
        TYPE = "funds.Set"
        SUMMARY = Summary("funds set; {held} held")
        held: Decimal

    contracts.FundsSet = FundsSet  # type: ignore[attr-defined]
    funds: Domain[Any] = Domain(name="funds", contracts=(contracts,), channels=(), processes=_none)
    with pytest.raises(ConflictingField) as caught:
        check_domains((*DOMAINS, funds))
    assert str(caught.value).startswith(
        "payload field 'held' has two types: int in course.ChangeRefused (integer) and "
        "Decimal in funds.Set (string). "
    )
    check_domains((*DOMAINS, replace(funds, two_typed_fields={"held": "a sum, not seats"})))


def test_a_declared_name_takes_the_json_text_path_and_a_stale_declaration_is_refused() -> None:
    assert two_typed([FundsHeld, SeatsHeld], {"held": "why"}) == {"held"}
    stale = r"two_typed_fields declares \['held'\], which no two contracts type differently"
    with pytest.raises(ConflictingField, match=stale):
        two_typed([FundsHeld, NoteHeld], {"held": "why"})


def test_two_python_types_the_payload_writes_alike_share_a_name() -> None:
    assert two_typed([FundsHeld, NoteHeld], {}) == frozenset()  # both a string
    assert wire_type(Literal["A", "B"]) == wire_type(Decimal | None) == "string"
    assert wire_type(tuple[SeatsHeld, ...]) == "array<object<held: integer>>"


def test_the_repository_s_domains_type_each_name_once_but_the_declared_waitlist() -> None:
    assert raw_fields() == set(enrollment_domain.DOMAIN.two_typed_fields) == {"waitlist"}
    schema = payload_schema()
    for name in raw_fields():
        assert schema[name].dataType == StringType()


def _none(settings: object) -> list[Any]:
    return []
