"""The order saga end to end: REST API -> Kafka -> Faust worker -> domain events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sagas.definitions.order_saga import OrderSaga
from tests.integration.harness import Stack, isolated_settings, running_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("orders")
    async with running_stack(isolated_settings(tmp), tmp) as s:
        yield s


async def test_happy_path_confirms_and_sells(stack: Stack) -> None:
    await stack.set_stock("apple", 10)
    await stack.set_stock("pear", 5)
    order = await stack.place([("apple", 3), ("pear", 2)])
    outcome = (await stack.tail.wait_for([order], 30))[order]
    assert (outcome.status, outcome.reason) == ("CONFIRMED", None)
    assert await stack.wait_stock("apple", lambda f: f["reserved"] == 0) == {
        "on_hand": 7,
        "reserved": 0,
    } | {k: v for k, v in stack.stock("apple").items() if k not in ("on_hand", "reserved")}
    pear = await stack.wait_stock("pear", lambda f: f["reserved"] == 0)
    assert (pear["on_hand"], pear["reserved"]) == (3, 0)
    events = stack.tail.events_of(f"order:{order}")
    # OrderPlaced says PENDING by itself; a status event announces each later step.
    assert [e.type for e in events[:2]] == ["order.Placed", "order.StatusChanged"]
    statuses = [OrderSaga.STATUSES.announced(e.type, e.payload) for e in events]
    assert statuses == ["PENDING", "AUTHORIZING", "CONFIRMING", "CAPTURING", "CONFIRMED"]
    sequences = [e.sequence for e in stack.tail.events_of(f"order:{order}")]
    assert sequences == list(range(1, len(sequences) + 1))


async def test_out_of_stock_rejects_and_releases_other_lines(stack: Stack) -> None:
    await stack.set_stock("plum", 10)
    await stack.set_stock("fig", 1)
    order = await stack.place([("plum", 4), ("fig", 2)])
    outcome = (await stack.tail.wait_for([order], 30))[order]
    assert outcome.status == "REJECTED"
    assert "fig" in (outcome.reason or "")
    plum = await stack.wait_stock("plum", lambda f: f["reserved"] == 0)
    assert plum["on_hand"] == 10
    fig = stack.stock("fig")
    assert fig is not None and (fig["on_hand"], fig["reserved"]) == (1, 0)


async def test_payment_declined_cancels_and_releases(stack: Stack) -> None:
    await stack.set_stock("kiwi", 3)
    order = await stack.place([("kiwi", 2)], method="decline")
    outcome = (await stack.tail.wait_for([order], 30))[order]
    assert outcome.status == "CANCELLED"
    assert "payment declined" in (outcome.reason or "")
    kiwi = await stack.wait_stock("kiwi", lambda f: f["reserved"] == 0)
    assert kiwi["on_hand"] == 3


async def test_customer_cancel_compensates(stack: Stack) -> None:
    await stack.set_stock("lime", 2)
    order = await stack.place([("lime", 1)], method="hang")  # the gateway never answers
    await stack.wait_stock("lime", lambda f: f["reserved"] == 1)
    response = await stack.http.post(f"/orders/{order}/cancel", json={"reason": "changed my mind"})
    assert response.status_code == 202
    outcome = (await stack.tail.wait_for([order], 30))[order]
    assert (outcome.status, outcome.reason) == ("CANCELLED", "changed my mind")
    lime = await stack.wait_stock("lime", lambda f: f["reserved"] == 0)
    assert lime["on_hand"] == 2


async def test_same_post_twice_with_one_idempotency_key_starts_one_saga(stack: Stack) -> None:
    await stack.set_stock("date", 5)
    headers = {"Idempotency-Key": "retry-me-1"}
    first = await stack.place([("date", 1)], headers=headers)
    second = await stack.place([("date", 1)], headers=headers)
    assert first == second
    assert (await stack.tail.wait_for([first], 30))[first].status == "CONFIRMED"
    await asyncio.sleep(1.0)  # room for a second saga, if one had started, to show itself
    date = await stack.wait_stock("date", lambda f: f["reserved"] == 0)
    assert date["on_hand"] == 4
    placed = [e for e in stack.tail.events_of(f"order:{first}") if e.type == "order.Placed"]
    assert len(placed) == 1


async def test_invalid_order_is_422_and_reaches_no_topic(stack: Stack) -> None:
    before = len(stack.tail.events)
    response = await stack.http.post(
        "/orders",
        json={
            "customer_id": "c1",
            "lines": [{"product_id": "x", "quantity": 0, "unit_price": "1"}],
            "payment": {"method": "card"},
        },
    )
    assert response.status_code == 422
    assert "lines.0.quantity" in response.json()["message"]
    await asyncio.sleep(0.5)
    assert len(stack.tail.events) == before


async def test_200_concurrent_orders_for_50_units_sell_exactly_50(stack: Stack) -> None:
    await stack.set_stock("last-units", 50)
    orders = await asyncio.gather(
        *(stack.place([("last-units", 1)], customer=f"c{i}") for i in range(200))
    )
    outcomes = await stack.tail.wait_for(orders, 90)
    assert len(outcomes) == 200
    statuses = [o.status for o in outcomes.values()]
    assert statuses.count("CONFIRMED") == 50
    assert statuses.count("REJECTED") == 150
    final = await stack.wait_stock("last-units", lambda f: f["reserved"] == 0)
    assert (final["on_hand"], final["reserved"]) == (0, 0)


async def test_poison_records_go_to_the_dead_letter_topic_and_the_stream_goes_on(
    stack: Stack,
) -> None:
    from services.worker.deadletter import DeadLetter
    from tests.integration.harness import produce_raw, read_all

    await produce_raw(stack.settings, "inventory", b"quince", b"\xff not json")
    await produce_raw(
        stack.settings,
        "inventory",
        b"quince",
        b'{"message_id":"m1","type":"ledger.Reserve","key":"quince",'
        b'"occurred_at":"2026-01-01T00:00:00Z","payload":{"reservation_id":"r","quantity":-1}}',
    )
    await stack.set_stock("quince", 7)  # the next good record is processed as usual

    async def dead_letters() -> list[dict[str, object]]:
        return [DeadLetter.decode(r.value) for r in await read_all(stack.settings, "deadletter")]

    letters: list[dict[str, object]] = []
    for _ in range(50):
        letters = [d for d in await dead_letters() if d["key"] == "quince"]
        if len(letters) == 2:
            break
        await asyncio.sleep(0.1)
    reasons = [str(d["reason"]) for d in letters]
    assert reasons[0].startswith("not JSON")
    assert "quantity" in reasons[1] and "ttl_seconds" in reasons[1]
    assert {d["stage"] for d in letters} == {"inventory"}
    assert letters[0]["value"] == "base64:/yBub3QganNvbg=="
