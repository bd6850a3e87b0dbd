"""Each saga type's definition drawn from its declaration (services/api/console/diagram.py):
the picture names every step, status, leg, participant and answer the declaration has, links
each status to the saga list filtered to it, and counts a shared status once. What is
checked is read off the declaration here too, so a new saga type is checked as it lands."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from runtime.settings import Settings
from sagas.catalog import SAGA_TYPES
from sagas.machinery.kit import Saga
from services.api.console.diagram import draw, participants
from services.operator.definitions import definitions

pytestmark = pytest.mark.unit

DEFINITIONS = {kind: found.newest for kind, found in definitions(Settings()).items()}


def link(status: str) -> str:
    return f"/console/sagas?status={status}"


def test_every_declared_saga_type_has_a_kit_definition_to_draw() -> None:
    assert sorted(DEFINITIONS) == sorted(s.entity_type for s in SAGA_TYPES)


@pytest.fixture(params=sorted(DEFINITIONS))
def saga(request: pytest.FixtureRequest) -> Saga[Any]:
    return DEFINITIONS[request.param]


def test_the_picture_names_every_step_status_leg_participant_and_answer(
    saga: Saga[Any],
) -> None:
    text = str(draw(saga, {}, link))
    named = set(saga.STATUSES.statuses) | set(saga.LEGS) | set(participants(saga).values())
    for flow in saga.FLOWS.values():
        named |= {flow.done, flow.failed, *flow.waits, *(flow.refused or {}).values()}
        for i, step in enumerate(flow.steps):
            assert f"{i + 1}. {step.status}" in text
    for port in saga.PORTS.values():
        named |= {a.TYPE for a in port.answers()} | {port.release("r").TYPE}
    missing = sorted(n for n in named if n not in text)
    assert missing == []


def test_every_step_links_to_the_list_filtered_to_its_status(saga: Saga[Any]) -> None:
    links = set(re.findall(r'<a href="([^"]+)"', str(draw(saga, {}, link))))
    statuses = {s.status for f in saga.FLOWS.values() for s in f.steps}
    assert {link(s) for s in statuses} <= links


def test_a_status_several_steps_share_shows_its_count_once(saga: Saga[Any]) -> None:
    steps = [s.status for f in saga.FLOWS.values() for s in f.steps]
    waits = {w for f in saga.FLOWS.values() for w in f.waits}
    counts = {status: 100 + i for i, status in enumerate(dict.fromkeys([*steps, *waits]))}
    text = str(draw(saga, counts, link))
    for status, n in counts.items():
        assert text.count(f">{n} now<") == 1, status
    shared = {s for s in steps if steps.count(s) > 1}
    for status in shared:
        assert text.count(f"{status} is shared") == steps.count(status) - 1


def test_a_timeout_compensates_before_the_pivot_and_asks_again_past_it(
    saga: Saga[Any],
) -> None:
    text = str(draw(saga, {}, link))
    forward = sum(s.forward for f in saga.FLOWS.values() for s in f.steps)
    steps = sum(len(f.steps) for f in saga.FLOWS.values())
    assert text.count(": asks again<") == forward
    assert text.count(": compensates<") == steps - forward


def test_text_from_the_declaration_is_escaped() -> None:
    text = str(draw(DEFINITIONS["order"], {}, lambda s: f'/x?a="{s}"&b=<i>'))
    assert "<i>" not in text and "&lt;i&gt;" in text


# --- the console's page ------------------------------------------------------------------


async def test_the_console_draws_each_definition_with_its_live_counts(tmp_path: Any) -> None:
    from readside import store
    from sagas.projections.orders import ORDERS
    from tests.unit.test_console import Console
    from tests.unit.test_console_sagas import order

    console = Console(tmp_path)
    now = datetime.now(UTC)
    with console.engine.begin() as conn:
        rows = [order(f"o-{i}", "AUTHORIZING", now) for i in range(3)]
        store.save_rows(conn, ORDERS, [*rows, order("o-p", "PENDING", now)])
    try:
        async with console.logged_in("read") as client:
            home = (await client.get("/console")).text
            assert 'href="/console/definitions/order"' in home
            page = await client.get("/console/definitions/order")
            assert page.status_code == 200
            assert ">3 now<" in page.text and ">1 now<" in page.text
            assert "/console/sagas?saga_type=order&amp;status=AUTHORIZING" in page.text
            every = (await client.get("/console/definitions")).text
            assert all(f'id="def-{kind}"' in every for kind in DEFINITIONS)
            missing = await client.get("/console/definitions/nope")
            assert missing.status_code == 404 and "no saga type" in missing.text
    finally:
        console.engine.dispose()
