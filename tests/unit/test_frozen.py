"""State changes in the core name the fields they change, and a mistyped name is refused
(sagas/machinery/frozen.py): pydantic's ``model_copy(update=...)`` would keep it silently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from sagas.machinery.frozen import checked_copy, validated_copy
from sagas.machinery.reservations import Reservations
from sagas.participants.payment import PaymentState

pytestmark = pytest.mark.unit

SAGAS = Path(__file__).resolve().parents[2] / "sagas"


def test_model_copy_would_keep_a_mistyped_field_that_checked_copy_refuses() -> None:
    state = PaymentState(status="AUTHORIZED")
    kept = state.model_copy(update={"stauts": "CAPTURED"})
    assert kept.status == "AUTHORIZED"  # the change meant is lost without a word
    with pytest.raises(TypeError, match=r"^PaymentState has no field stauts$"):
        checked_copy(state, {"stauts": "CAPTURED"})


def test_checked_copy_changes_the_named_fields_and_leaves_the_original_as_it_was() -> None:
    funds = Reservations[int](on_hand=5)
    more = checked_copy(funds, {"on_hand": 7})
    assert (funds.on_hand, more.on_hand, more.holds) == (5, 7, {})


def test_validated_copy_also_refuses_a_value_of_the_wrong_type() -> None:
    state = PaymentState(status="AUTHORIZED")
    with pytest.raises(TypeError, match="no field amont, stauts"):
        validated_copy(state, {"stauts": "CAPTURED", "amont": 1})
    with pytest.raises(ValidationError):
        validated_copy(state, {"status": "LOST"})
    assert validated_copy(state, {"status": "CAPTURED"}).status == "CAPTURED"


def test_no_state_in_the_core_is_changed_with_an_unchecked_model_copy() -> None:
    unchecked = [
        f"{path.relative_to(SAGAS.parent)}:{number}"
        for path in sorted(SAGAS.rglob("*.py"))
        if path.name != "frozen.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\.model_copy\(\s*(update\b|$)", line)
    ]
    assert unchecked == []
