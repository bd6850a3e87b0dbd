"""The demo's order story: each saga outcome (confirmed, rejected, declined, cancelled),
placed through the REST API and read back from it; one saga's timeline shows why."""

from __future__ import annotations

import asyncio
from typing import Any

import click
import httpx

from services.api.queries import MAX_WAIT_S


async def story(http: httpx.AsyncClient, run: str, timeout: float) -> bool:
    """True when every order reached a final status."""
    widget, gadget = f"widget-{run}", f"gadget-{run}"
    scenarios = {
        "2 widgets, paid by card": ([(widget, 2)], "card"),
        "2 gadgets (only 1 in stock)": ([(gadget, 2)], "card"),
        "1 widget, card declined": ([(widget, 1)], "decline"),
        "1 widget + 1 gadget": ([(widget, 1), (gadget, 1)], "card"),
    }
    for product, on_hand in ((widget, 5), (gadget, 1)):
        response = await http.put(f"/products/{product}/stock", json={"on_hand": on_hand})
        response.raise_for_status()
    placed: dict[str, tuple[str, str]] = {}
    for label, (lines, method) in scenarios.items():
        body = {
            "customer_id": f"demo-{run}",
            "lines": [{"product_id": p, "quantity": q, "unit_price": "9.90"} for p, q in lines],
            "payment": {"method": method},
        }
        response = await http.post("/orders", json=body)
        response.raise_for_status()
        accepted = response.json()
        placed[label] = (accepted["order_id"], accepted["consistency_token"])
        click.echo(f"placed   {label:32} -> order {accepted['order_id']}")
    deadline = asyncio.get_running_loop().time() + timeout
    outcomes = await asyncio.gather(
        *(_final_order(http, order_id, token, deadline) for order_id, token in placed.values())
    )
    for label, order in zip(placed, outcomes, strict=True):
        click.echo(f"outcome  {label:32} -> {_describe(order)}")
    await _show_why(http, placed["1 widget, card declined"][0])
    for product in (widget, gadget):
        stock = (await http.get(f"/products/{product}/stock")).json()
        click.echo(
            f"stock    {product:32} -> on hand {stock.get('on_hand')}, "
            f"reserved {stock.get('reserved')}, available {stock.get('available')}"
        )
    return all(order is not None and order["final"] for order in outcomes)


async def _final_order(
    http: httpx.AsyncClient, order_id: str, token: str, deadline: float
) -> dict[str, Any] | None:
    """GET /orders/{id}?wait=... with the consistency token, until a final status or the
    deadline (a 504 only means the projector is still catching up)."""
    order: dict[str, Any] | None = None
    loop = asyncio.get_running_loop()
    while (left := deadline - loop.time()) > 0:
        wait = min(left, MAX_WAIT_S)
        try:
            response = await http.get(
                f"/orders/{order_id}", params={"wait": f"{wait:.1f}", "consistency_token": token}
            )
        except httpx.HTTPError:
            await asyncio.sleep(0.5)
            continue
        if response.status_code == 200:
            order = response.json()
            if order["final"]:
                return order
        else:
            await asyncio.sleep(0.2)
    return order


async def _show_why(http: httpx.AsyncClient, saga_id: str) -> None:
    """The saga's timeline: every step, so the outcome explains itself."""
    response = await http.get(f"/sagas/{saga_id}")
    if response.status_code != 200:
        return
    for step in response.json()["steps"]:
        click.echo(f"  step   {step['entity_key'][:38]:38} {step['summary']}")


def _describe(order: dict[str, Any] | None) -> str:
    if order is None:
        return "not projected yet (is `sagaline projector` running?)"
    if not order["final"]:
        return f"{order['status']} (no final status yet)"
    return f"{order['status']} ({order['reason']})" if order["reason"] else order["status"]
