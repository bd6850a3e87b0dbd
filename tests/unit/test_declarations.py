"""The read-model and saga-status declarations: what they refuse, what they promise, and
the lint check that keeps every component reading them instead of naming a model."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from readside import schema
from sagas.catalog import READ_MODELS, SAGA_TYPES, model_for, saga_type
from sagas.contracts import orders, payment
from sagas.domains import DOMAINS
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Envelope, Message, Summary
from sagas.projections.declare import (
    Column,
    EntityId,
    Integer,
    LatestSequence,
    ReadModel,
    SagaType,
    Text,
)
from sagas.projections.orders import ORDERS
from scripts.check_declarations import ROOT, SCANNED, SCANNED_TESTS, check, findings_in
from tests.spark.golden import sample

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _event(message: Message, key: str, sequence: int) -> Envelope:
    return Envelope.wrap(
        message,
        message_id=f"{key}#{sequence}",
        key=key,
        occurred_at=T0,
        entity_type=key.split(":", 1)[0],
        sequence=sequence,
    )


# --- the declarations ------------------------------------------------------------------


class Tiny(BaseModel):
    tiny_id: str
    n: int


def test_a_declaration_must_list_its_row_fields_in_order_and_name_a_key_column() -> None:
    cols = (Column("tiny_id", Text(10), EntityId()), Column("n", Integer(), LatestSequence()))
    kw: dict[str, Any] = {"entity_type": "tiny", "row_type": Tiny}
    ReadModel(name="tiny", key="tiny_id", starts=Message, columns=cols, **kw)
    with pytest.raises(ValueError, match="must be the fields of Tiny"):
        ReadModel(name="tiny", key="tiny_id", starts=Message, columns=cols[::-1], **kw)
    with pytest.raises(ValueError, match="key 'id' is not a column"):
        ReadModel(name="tiny", key="id", starts=Message, columns=cols, **kw)


def test_saga_statuses_must_know_their_final_ones_and_their_event_must_say_why() -> None:
    with pytest.raises(ValueError, match=r"final statuses \['DONE'\] unknown"):
        SagaStatuses(orders.OrderStatusChanged, ("PENDING",), frozenset({"DONE"}))
    with pytest.raises(ValueError, match="has no 'status' field"):
        SagaStatuses(payment.Captured, ("X",), frozenset({"X"}))
    order_saga = saga_type("order")
    with pytest.raises(ValueError, match="folds another"):
        SagaType("product", order_saga.statuses, ORDERS)
    with pytest.raises(ValueError, match=r"failed statuses \['PENDING'\] are not final"):
        SagaStatuses(
            orders.OrderStatusChanged,
            ("PENDING", "DONE"),
            frozenset({"DONE"}),
            failed=frozenset({"PENDING"}),
        )


@pytest.mark.parametrize("saga", SAGA_TYPES, ids=lambda s: s.entity_type)
def test_a_saga_s_start_fact_alone_shows_its_first_status(saga: SagaType) -> None:
    """No status event follows the start fact (one record per saga fewer): its row, the
    event tail and the fault harness read the first status from the start fact itself."""
    start = saga.statuses.start
    assert start is not None and start is saga.model.starts
    event = _event(sample(start), saga.key("s-1"), 1)
    row = saga.model.fold(None, event)
    assert row is not None
    assert getattr(row, saga.status_column) == saga.statuses.initial == "PENDING"
    assert saga.statuses.announced(event.type, event.payload) == "PENDING"
    # Its timeline line says so too: a summary is a plain template (Spark renders it
    # natively), so the status is literal text there, and this keeps it the first status.
    assert start.SUMMARY is not None
    assert start.SUMMARY.render(sample(start)).endswith(f"; status {saga.statuses.initial}")
    assert saga.statuses.announced(saga.statuses.event.TYPE, {"status": "X"}) == "X"
    other = _event(sample(orders.CancelRefused), saga.key("s-1"), 2)
    assert saga.statuses.announced(other.type, other.payload) is None
    wrong = SagaStatuses(
        saga.statuses.event, saga.statuses.statuses, saga.statuses.final, start=orders.CancelRefused
    )
    with pytest.raises(ValueError, match=r"starts with order\.CancelRefused, its model"):
        SagaType(saga.entity_type, wrong, saga.model)


def test_failures_and_compensations_are_declared_for_the_console() -> None:
    assert saga_type("order").statuses.failed == {"REJECTED", "CANCELLED"}
    assert saga_type("enrollment").statuses.failed == {"REJECTED"}  # a drop is no failure
    # Each participant of a saga (a channel of its domain that does not announce the saga's
    # statuses) undoes its step by one compensating fact, and nothing else compensates.
    compensations = {t for t, m in Message.known_types().items() if m.COMPENSATION}
    undoing: set[str] = set()
    for domain in DOMAINS:
        for saga in domain.saga_types:
            for channel in domain.channels:
                if saga.statuses.event not in channel.facts:
                    undone = {f.TYPE for f in channel.facts if f.COMPENSATION}
                    assert len(undone) == 1, (channel.name, undone)
                    undoing |= undone
    assert compensations == undoing


def test_every_model_has_its_table_and_every_saga_type_a_model_of_its_own_entities() -> None:
    assert list(schema.MODEL_TABLES) == [m.name for m in READ_MODELS]
    for model in READ_MODELS:
        table = schema.table_of(model)
        assert [c.name for c in table.c] == [c.name for c in model.columns]
        assert [c.name for c in table.primary_key] == [model.key]
        assert model_for(model.entity_type) is model
    for saga in SAGA_TYPES:
        assert saga.model.entity_type == saga.entity_type
        assert saga.statuses.final < set(saga.statuses.statuses)
    with pytest.raises(KeyError, match="no saga type for entity type 'payment'"):
        saga_type("payment")


@pytest.mark.parametrize("model", READ_MODELS, ids=lambda m: m.name)
def test_a_fold_reads_only_the_event_types_its_declaration_names(model: ReadModel[Any]) -> None:
    """An event of any other type moves at most the columns that follow every event's
    sequence: the declaration's list is what the native twin and the limits rely on."""
    start_type = next(m for m in Message.known_types().values() if issubclass(m, model.starts))
    key = f"{model.entity_type}:e-1"
    row = model.fold(None, _event(sample(start_type), key, 1))
    assert row is not None, f"{model.name}: its start event {start_type.TYPE} makes no row"
    follows_sequence = {c.name for c in model.columns if c.value == LatestSequence()}
    read = tuple(model.event_types())
    for other in Message.known_types().values():
        if issubclass(other, read):
            continue
        after = model.fold(row, _event(sample(other), key, 2))
        assert after is not None, f"{model.name}: {other.TYPE} deleted the row"
        changed = {n for n in type(row).model_fields if getattr(after, n) != getattr(row, n)}
        assert changed <= follows_sequence, f"{model.name}: {other.TYPE} changed {changed}"


# --- summaries on the contracts --------------------------------------------------------


def test_a_summary_renders_fields_counts_and_its_variant() -> None:
    placed = orders.OrderPlaced(
        customer_id="c-1",
        lines=(orders.OrderLine(product_id="p", quantity=1, unit_price=Decimal("2.50")),),
        payment_method="card",
        total=Decimal("2.50"),
    )
    assert orders.OrderPlaced.SUMMARY is not None
    assert orders.OrderPlaced.SUMMARY.render(placed) == (
        "order placed by c-1: 1 line(s), total 2.50; status PENDING"
    )
    voided = payment.Voided.SUMMARY
    assert voided is not None
    assert voided.render(payment.Voided(amount=Decimal("7"), refunded=False)) == (
        "payment of 7 voided"
    )
    assert voided.render(payment.Voided(amount=Decimal("7"), refunded=True)) == (
        "payment of 7 refunded"
    )


def test_a_summary_naming_a_field_its_contract_lacks_is_refused_at_import() -> None:
    with pytest.raises(TypeError, match=r"SUMMARY names unknown fields \['amount'\]"):

        class Broken(Message):
            SUMMARY = Summary("paid {amount}")
            reason: str

    with pytest.raises(ValueError, match="go together"):
        Summary("x", when="reason")


# --- the lint check --------------------------------------------------------------------

WRONG = """
from sagas.projections.orders import apply_order
from pyspark.sql import functions as F
from sagas.contracts.orders import OrderPlaced

def fold(entity_type, row, event):
    if entity_type == "order":
        return apply_order(row, event)
    if event.entity_type in ("product", "course"):
        return None
    if event.key.split(":")[0] == "orders":
        return None
    return F.col("type") == OrderPlaced.TYPE
"""

GENERIC = """
from sagas.catalog import model_for

def fold(entity_type, row, event, types):
    model = model_for(entity_type)
    same = model.entity_type == entity_type
    return [F.col("type") == m.TYPE for m in types], model.fold(row, event), same
"""


def test_the_lint_check_finds_every_kind_of_dispatch_on_a_particular_model() -> None:
    found = findings_in(Path("spark_projections/x.py"), WRONG, "spark_projections.x")
    assert [(f.line, f.what) for f in found] == [
        (2, "imports the fold apply_order of sagas.projections.orders"),
        (7, "entity_type compared with a constant"),
        (9, "entity_type compared with a constant"),
        (11, "dispatch on declared name(s) ['orders']"),
        (13, "dispatch on a message type's TYPE"),
    ]
    assert findings_in(Path("readside/x.py"), GENERIC, "readside.x") == []


def test_an_assertion_about_what_a_route_answered_is_no_dispatch() -> None:
    source = 'def test(body):\n    assert body["saga_type"] == "order"\n'
    assert findings_in(Path("tests/integration/x.py"), source, "tests.integration.x") == []


def test_a_fold_made_by_a_factory_is_found_by_the_name_its_module_gives_it() -> None:
    source = "from sagas.projections.stock import apply_stock\n"
    found = findings_in(Path("readside/x.py"), source, "readside.x")
    assert [f.what for f in found] == ["imports the fold apply_stock of sagas.projections.stock"]


def test_the_declaring_module_may_name_its_own_fold() -> None:
    source = "from sagas.projections.orders import apply_order\n"
    assert findings_in(Path("x.py"), source, "sagas.projections.orders") == []


def test_the_repository_passes_the_lint_check() -> None:
    assert [str(f) for f in check([ROOT / p for p in (*SCANNED, *SCANNED_TESTS)])] == []


def test_a_string_equal_to_an_entity_type_counts_only_beside_an_entity_type() -> None:
    """A newcomer's ``kind == "transfer"`` failed the check once its domain declared the
    entity type ``transfer``: only an expression holding an entity type counts."""
    source = """
def f(kind, name, event, body):
    same = kind == "order"
    if name in ("order", "course") or event.kind == "orders":
        return same
    if body["saga_type"] == "order":
        return event.key.partition(":")[0] == "course"
    return event.saga_type != "enrollment"
"""
    found = findings_in(Path("tests/integration/x.py"), source, "tests.integration.x")
    assert sorted((f.line, f.what) for f in found) == [
        (6, "dispatch on declared name(s) ['order']"),
        (7, "dispatch on declared name(s) ['course']"),
        (8, "dispatch on declared name(s) ['enrollment']"),
    ]
