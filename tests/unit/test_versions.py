"""Versions: an instance runs by the version that started it, a new one starts on the
newest, a declared upgrade moves an instance to newer rules, and a version dropped while
instances of it are in flight refuses their messages instead of deciding them anew."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from runtime.settings import Settings
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.process import Process
from sagas.machinery.record import Record
from sagas.machinery.step import step
from sagas.machinery.versions import VersionGone, Versions, in_flight
from sagas.messages import Envelope
from sagas.projections.orders import ORDERS, OrderRow
from services.inflight import count, latest

from .helpers import Driver, at, envelope, event_envelopes, events
from .versions_example import OrderSagaV2, OrderSagaV3, OrderStateV3, domain, upgrade_from_1

pytestmark = pytest.mark.unit


def placed(order_id: str, method: str = "card") -> Envelope:
    line = oc.OrderLine(product_id="p1", quantity=1, unit_price=Decimal("5.00"))
    place = oc.PlaceOrder(customer_id="c1", lines=(line,), payment=oc.PaymentDetails(method=method))
    return envelope(place, key=order_id, saga_id=order_id)


def authorizing(process: Process[Any], order_id: str) -> Driver:
    """An order whose stock is reserved: its saga asks for the payment (AUTHORIZING)."""
    driver = Driver(process)
    driver(placed(order_id))
    reserved = oc_reserved(order_id)
    driver(reserved)
    assert driver.state.status == "AUTHORIZING"
    return driver


def oc_reserved(order_id: str) -> Envelope:
    from sagas.contracts import ledger as lc

    return envelope(lc.Reserved(reservation_id=f"{order_id}:p1", quantity=1, on_hand=9,
                                reserved=1, expires_at="2024-01-01T12:05:00Z"),
                    key=order_id, saga_id=order_id)  # fmt: skip


def cancel(order_id: str) -> Envelope:
    return envelope(oc.CancelOrder(reason="changed mind"), key=order_id, saga_id=order_id)


def both(newest: type[OrderSaga], *older: type[OrderSaga]) -> Process[Any]:
    return Versions.of(newest(), older)


def test_an_instance_started_on_version_1_finishes_by_version_1_and_a_new_one_starts_on_2() -> None:
    # given an order started before version 2 existed (its record holds no version)
    old = authorizing(OrderSaga(), "o-1")
    assert old.record is not None and old.record.version is None
    # when the worker restarts with version 2 beside version 1
    process = both(OrderSagaV2, OrderSaga)
    old.process = process
    # then the old order is cancelled by version 1's rule, a new one refused by version 2's
    old(cancel("o-1"))
    assert old.state.status == "CANCELLED"
    new = authorizing(process, "o-2")
    assert new.record is not None and new.record.version == 2
    result = new(cancel("o-2"))
    assert new.state.status == "AUTHORIZING"
    assert [type(e) for e in events(result.outbound)] == [oc.CancelRefused]


def test_a_declared_upgrade_continues_an_old_instance_on_the_new_rules_and_upgraded_state() -> None:
    old = authorizing(OrderSaga(), "o-1")
    old.process = both(OrderSagaV3, OrderSaga)
    result = old(cancel("o-1"))
    # version 3's rule (cancels refused past PENDING), its state's shape, its version kept
    assert [type(e) for e in events(result.outbound)] == [oc.CancelRefused]
    assert isinstance(old.state, OrderStateV3) and old.state.wallet == "card"
    assert old.record is not None and old.record.version == 3


def test_the_upgrade_keeps_every_field_of_the_old_state_and_fills_the_new_one() -> None:
    old = authorizing(OrderSaga(), "o-1").state
    new = upgrade_from_1(old)
    assert {k: v for k, v in new.__dict__.items() if k != "wallet"} == old.__dict__
    assert (new.wallet, upgrade_from_1(old.but(payment_method="paypal")).wallet) == (
        "card",
        "other",
    )


def test_a_version_dropped_while_its_instances_are_in_flight_refuses_their_messages() -> None:
    old = authorizing(OrderSaga(), "o-1")
    assert old.record is not None
    with pytest.raises(VersionGone, match="started on version 1"):
        step(both(OrderSagaV2), old.record, cancel("o-1"), at(60))
    # a version that declares the upgrade takes them on
    assert step(both(OrderSagaV3), old.record, cancel("o-1"), at(60)).record.version == 3


def test_a_record_reads_back_as_its_versions_state_and_an_unversioned_one_keeps_its_bytes() -> None:
    process = both(OrderSagaV3, OrderSagaV2, OrderSaga)
    codec = Record.codec(process.state_type)
    v1 = authorizing(OrderSaga(), "o-1").record
    v3 = authorizing(process, "o-3").record
    assert v1 is not None and v3 is not None
    assert b'"version"' not in v1.encode()
    assert b'"version":3' in v3.encode()
    back1 = codec.decode("o-1", v1.encode(), lambda _: None)
    back3 = codec.decode("o-3", v3.encode(), lambda _: None)
    assert type(back1.state) is type(v1.state) and back1.state == v1.state
    assert type(back3.state) is OrderStateV3 and back3.state == v3.state


def test_versions_are_declared_once_each_and_below_the_newest() -> None:
    with pytest.raises(ValueError, match="each below the newest"):
        both(OrderSagaV2, OrderSagaV3)
    with pytest.raises(ValueError, match="each older version once"):
        both(OrderSagaV3, OrderSaga, OrderSaga)


def test_the_domain_builds_the_versions_its_channel_lists_and_they_declare_what_all_accept() -> (
    None
):
    built = {p.name: p for p in domain(OrderSagaV2, OrderSaga).build(Settings())}
    saga = built["order-saga"]
    assert isinstance(saga, Versions) and saga.version == 2
    assert sorted(saga.by_version) == [1, 2]
    assert set(type(saga).ACCEPTS) == set(OrderSaga.ACCEPTS)
    assert pc.Authorized in type(saga).ACCEPTS


def test_in_flight_counts_unfinished_records_by_the_version_they_hold() -> None:
    process = both(OrderSagaV2, OrderSaga)
    v1 = authorizing(OrderSaga(), "o-1")
    v2 = authorizing(process, "o-2")
    done = authorizing(process, "o-3")
    done(cancel("o-3"))  # refused: still in flight
    ended = Driver(process)
    ended(placed("o-4", method="x"))
    ended(cancel("o-4"))
    assert ended.state.status == "CANCELLED"
    records = [d.record for d in (v1, v2, done, ended) if d.record is not None]
    assert in_flight(process, records) == {1: 1, 2: 2}


def test_the_versions_command_says_which_older_version_can_go() -> None:
    process = both(OrderSagaV2, OrderSaga)
    v2 = authorizing(process, "o-2")
    assert v2.record is not None
    table = latest(
        [
            (b"o-2", v2.record.encode()),
            (b"gone", b"{}"),
            (b"gone", None),
            (b"\x00position/t/0", b"7"),
        ]
    )
    assert set(table) == {"o-2", "\x00position/t/0"}
    lines = count(process, table).lines()
    assert lines == [
        "order-saga: newest version 2",
        "  version 1: none in flight: it can be deleted",
        "  version 2: 1 in flight (new instances start here)",
    ]


# --- the version reaches the read side: every fact carries its instance's version -------


def facts_of(driver: Driver, *inputs: Envelope) -> list[Envelope]:
    """The facts ``driver``'s key publishes on ``inputs``, in order."""
    return [e for env in inputs for e in event_envelopes(driver(env).outbound)]


def test_an_unversioned_definition_s_facts_carry_no_version_and_keep_their_bytes() -> None:
    driver = Driver(OrderSaga())
    facts = facts_of(driver, placed("o-1"), oc_reserved("o-1"), cancel("o-1"))
    assert [e.type for e in facts] == ["order.Placed", "order.StatusChanged", "order.StatusChanged"]
    assert all(
        e.definition_version is None and b'"definition_version"' not in e.encode() for e in facts
    )


def test_a_new_instance_s_facts_carry_the_newest_version_and_an_old_one_s_carry_none() -> None:
    process = both(OrderSagaV2, OrderSaga)
    old = authorizing(OrderSaga(), "o-1")
    old.process = process
    new = Driver(process)
    old_facts = facts_of(old, cancel("o-1"))
    new_facts = facts_of(new, placed("o-2"), oc_reserved("o-2"), cancel("o-2"))
    # the old order (its record holds no version) publishes as version 1 always did
    assert old_facts and all(e.definition_version is None for e in old_facts)
    # every fact of the new one, its start, its steps and its refusal, says version 2
    assert [e.type for e in new_facts] == [
        "order.Placed",
        "order.StatusChanged",
        "order.CancelRefused",
    ]
    assert all(
        e.definition_version == 2 and b'"definition_version":2' in e.encode() for e in new_facts
    )
    assert all(Envelope.decode(e.encode()) == e for e in new_facts)


def test_an_upgraded_instance_s_facts_carry_the_version_it_now_runs_on() -> None:
    old = authorizing(OrderSaga(), "o-1")
    old.process = both(OrderSagaV3, OrderSaga)
    facts = facts_of(old, cancel("o-1"))
    assert facts and all(e.definition_version == 3 for e in facts)


def test_the_saga_s_row_shows_the_version_its_facts_carry_and_1_for_facts_without() -> None:
    def row_of(facts: list[Envelope]) -> OrderRow | None:
        row: OrderRow | None = None
        for fact in facts:
            row = ORDERS.fold(row, fact)
        return row

    process = both(OrderSagaV3, OrderSaga)
    before = Driver(OrderSaga())
    first = facts_of(before, placed("o-1"), oc_reserved("o-1"))
    unversioned = row_of(first)
    assert unversioned is not None and unversioned.version == 1
    before.process = process  # upgraded to version 3 at its next message, whose rules
    upgraded = row_of(first + facts_of(before, cancel("o-1")))  # refuse the cancel
    assert upgraded is not None and (upgraded.status, upgraded.version) == ("AUTHORIZING", 3)
    new = Driver(process)
    started = row_of(facts_of(new, placed("o-2")))
    assert started is not None and (started.status, started.version) == ("PENDING", 3)
