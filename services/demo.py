"""A short scripted run that shows each saga outcome: confirmed, rejected, declined, cancelled."""

from __future__ import annotations

import uuid

import click
import httpx

from services.event_tail import EventTail
from services.settings import Settings


async def run_demo(settings: Settings, base_url: str, timeout: float) -> bool:
    run = uuid.uuid4().hex[:6]
    widget, gadget = f"widget-{run}", f"gadget-{run}"
    tail = EventTail(settings)
    await tail.start()
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
            for product, on_hand in ((widget, 5), (gadget, 1)):
                (
                    await http.put(f"/products/{product}/stock", json={"on_hand": on_hand})
                ).raise_for_status()
            scenarios = {
                "2 widgets, paid by card": ([(widget, 2)], "card"),
                "2 gadgets (only 1 in stock)": ([(gadget, 2)], "card"),
                "1 widget, card declined": ([(widget, 1)], "decline"),
                "1 widget + 1 gadget": ([(widget, 1), (gadget, 1)], "card"),
            }
            placed: dict[str, str] = {}
            for label, (lines, method) in scenarios.items():
                body = {
                    "customer_id": f"demo-{run}",
                    "lines": [
                        {"product_id": p, "quantity": q, "unit_price": "9.90"} for p, q in lines
                    ],
                    "payment": {"method": method},
                }
                response = await http.post("/orders", json=body)
                response.raise_for_status()
                placed[label] = response.json()["order_id"]
                click.echo(f"placed   {label:32} -> order {placed[label]}")
        outcomes = await tail.wait_for(placed.values(), timeout)
    finally:
        await tail.stop()
    for label, order_id in placed.items():
        outcome = outcomes.get(order_id)
        text = (
            f"{outcome.status} ({outcome.reason})"
            if outcome and outcome.reason
            else (outcome.status if outcome else "no outcome yet")
        )
        click.echo(f"outcome  {label:32} -> {text}")
    return len(outcomes) == len(placed)
