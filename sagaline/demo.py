"""A short scripted run: each domain's story (the module its declaration names as ``demo``:
``sagaline.order_demo`` shows each order outcome, ``sagaline.enrollment_demo`` a full course),
told through the REST API and read back from it."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, cast

import click
import httpx

from runtime.edges import edge_module
from runtime.settings import Settings
from sagas.domains import DOMAINS
from sagas.machinery.domain import Domain
from services.api.queries import MAX_WAIT_S

Story = Callable[[httpx.AsyncClient, str, float], Awaitable[bool]]
"""A domain's demo story: the client, this run's suffix for fresh ids, the seconds it may
wait for outcomes; True when every step ended as it says."""


async def _wait_for_api(http: httpx.AsyncClient, timeout: float) -> None:
    """The API may still be starting (``make run`` starts it in the background)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            (await http.get("/healthz")).raise_for_status()
            return
        except httpx.HTTPError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.5)


async def run_demo(
    settings: Settings, base_url: str, timeout: float, key: str | None = None
) -> bool:
    """Tell every domain's story (``Domain.demo``), in domain order, through the REST API,
    sending ``key`` as the API key (``make run`` creates one: `sagaline keys local`).

    ``settings`` is kept for the CLI's call; everything here goes through HTTP.
    """
    stories = [story_of(d, d.demo) for d in DOMAINS if d.demo is not None]
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    run = uuid.uuid4().hex[:6]
    told = True
    async with httpx.AsyncClient(
        base_url=base_url, timeout=MAX_WAIT_S + 10, headers=headers
    ) as http:
        await _wait_for_api(http, timeout)
        for story in stories:
            try:
                told = await story(http, run, timeout) and told
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code not in (401, 403):
                    raise
                raise click.ClickException(
                    f"the API refused the demo: {exc.response.json()['message']} "
                    "(`sagaline keys local` writes a key for it to .local/api-key)"
                ) from None
    return told


def story_of(domain: Domain[Any], name: str) -> Story:
    """The ``story`` coroutine of the module a domain names as its demo; a ValueError names
    the domain and what is missing."""
    story = getattr(edge_module(domain, name, "demo"), "story", None)
    if not inspect.iscoroutinefunction(story):
        raise ValueError(
            f"domain {domain.name!r}: its demo module {name!r} must export story, a "
            "coroutine function (http, run, timeout) -> bool"
        )
    return cast(Story, story)
