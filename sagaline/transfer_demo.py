"""The demo's transfer story: two accounts opened, a transfer that goes through, one the
funds do not cover and one to a closed account, read back through the REST API."""

from __future__ import annotations

import asyncio
from typing import Any

import click
import httpx

from services.api.queries import MAX_WAIT_S


async def story(http: httpx.AsyncClient, run: str, timeout: float) -> bool:
    """True when every transfer reached a final status."""
    alice, bob, gone = f"alice-{run}", f"bob-{run}", f"gone-{run}"
    opened = [
        await _call(http, "PUT", f"/accounts/{a}", {"balance": "100.00"})
        for a in (alice, bob, gone)
    ]
    await _call(http, "POST", f"/accounts/{gone}/close", None)
    scenarios = {
        f"40.00 from {alice} to {bob}": (alice, bob, "40.00"),
        f"500.00 from {bob} to {alice}": (bob, alice, "500.00"),
        f"10.00 from {alice} to a closed account": (alice, gone, "10.00"),
    }
    sent = {}
    for label, (source, destination, amount) in scenarios.items():
        body = {"source": source, "destination": destination, "amount": amount}
        sent[label] = await _call(http, "POST", "/transfers", body)
        click.echo(f"asked    {label:42} -> transfer {sent[label]['transfer_id']}")
    deadline = asyncio.get_running_loop().time() + timeout
    ends = await asyncio.gather(
        *(_final(http, a["transfer_id"], a["consistency_token"], deadline) for a in sent.values())
    )
    for label, end in zip(sent, ends, strict=True):
        said = (
            "no final status yet"
            if end is None
            else f"{end['status']}{': ' + end['reason'] if end['reason'] else ''}"
        )
        click.echo(f"outcome  {label:42} -> {said}")
    for account, token in (
        (alice, opened[0]["consistency_token"]),
        (bob, opened[1]["consistency_token"]),
    ):
        row = (await http.get(f"/accounts/{account}", params={"consistency_token": token})).json()
        click.echo(
            f"account  {account:42} -> balance {row.get('balance')}, on hold {row.get('on_hold')}"
        )
    return all(end is not None for end in ends)


async def _call(http: httpx.AsyncClient, method: str, path: str, body: Any) -> dict[str, Any]:
    response = await http.request(method, path, json=body)
    response.raise_for_status()
    answer: dict[str, Any] = response.json()
    return answer


async def _final(
    http: httpx.AsyncClient, transfer_id: str, token: str, deadline: float
) -> dict[str, Any] | None:
    """GET /transfers/{id}?wait=... until a final status or the deadline."""
    loop = asyncio.get_running_loop()
    while (left := deadline - loop.time()) > 0:
        params = {"wait": f"{min(left, MAX_WAIT_S):.1f}", "consistency_token": token}
        try:
            response = await http.get(f"/transfers/{transfer_id}", params=params)
        except httpx.HTTPError:
            await asyncio.sleep(0.5)
            continue
        if response.status_code == 200 and response.json()["status"] in ("COMPLETED", "FAILED"):
            answer: dict[str, Any] = response.json()
            return answer
        await asyncio.sleep(0.2)
    return None
