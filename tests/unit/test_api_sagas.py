"""The saga list and overview over HTTP (``GET /sagas``, ``GET /overview/sagas``: the
``read`` scope, JSON, bad filters a 422 with a sentence, the same keyset pages as the
console's) and on the command line (``sagaline sagas list|show``), over the rows of
tests/unit/test_console_sagas.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from readside.engine import create_read_engine
from sagaline import cli
from tests.unit.test_console import Console
from tests.unit.test_console_sagas import ON_OTHER_VERSIONS, fill, run_on_versions

pytestmark = pytest.mark.unit


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Console, httpx.AsyncClient]]:
    c = Console(tmp_path, step_timeout_s=60.0)
    fill(c.engine)
    c.app.state.watch = object()  # no consistency token is sent: nothing waits on it
    key = c.key("read")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=c.app),
        base_url="http://api",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        yield c, client
    c.engine.dispose()


async def test_the_list_pages_through_every_saga_once(
    api: tuple[Console, httpx.AsyncClient],
) -> None:
    _, client = api
    seen: list[str] = []
    params: dict[str, Any] = {"limit": 4}
    while True:
        page = await client.get("/sagas", params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        seen += [s["saga_id"] for s in body["sagas"]]
        if body["next"] is None:
            break
        params = {"limit": 4, "after": body["next"]}
    whole = (await client.get("/sagas", params={"limit": 500})).json()["sagas"]
    assert seen == [s["saga_id"] for s in whole]
    assert len(seen) == len(set(seen)) == 34


async def test_filters_and_the_fields_of_a_listed_saga(
    api: tuple[Console, httpx.AsyncClient],
) -> None:
    _, client = api
    stuck = (await client.get("/sagas", params={"outcome": "stuck"})).json()["sagas"]
    assert [s["saga_id"] for s in stuck] == ["o-stuck", "e-wait"]
    assert all(s["stuck"] and s["outcome"] == "in_flight" for s in stuck)
    comp = (await client.get("/sagas", params={"product": "p1"})).json()["sagas"]
    assert comp[0]["saga_id"] == "o-comp" and comp[0]["outcome"] == "compensated"
    assert comp[0]["ids"] == {"customer_id": "c-1"}
    refused = (await client.get("/sagas", params={"entity": "product:p9"})).json()["sagas"]
    assert refused[0]["outcome"] == "failed"  # REJECTED with nothing undone


@pytest.mark.parametrize(
    ("params", "sentence"),
    [
        ({"customer": "c-1", "saga_type": "enrollment"}, "is about order sagas"),
        ({"status": "DROPPED", "saga_type": "order"}, "No order has the status"),
        ({"after": "bm9wZQ"}, "cursor is not one this list made"),
        ({"since": "2026-11-25T10:00:00Z", "until": "2026-11-25T09:00:00Z"}, "window is empty"),
        ({"saga_type": "invoice"}, ""),
        ({"limit": 0}, ""),
        ({"customer": "a\x00b"}, ""),
    ],
)
async def test_a_bad_filter_is_a_422_with_a_sentence(
    api: tuple[Console, httpx.AsyncClient], params: dict[str, Any], sentence: str
) -> None:
    _, client = api
    response = await client.get("/sagas", params=params)
    assert response.status_code == 422, response.text
    assert sentence in response.json()["message"]


async def test_the_list_and_overview_need_the_read_scope(
    api: tuple[Console, httpx.AsyncClient],
) -> None:
    console, client = api
    commands = console.key("commands")
    for path in ("/sagas", "/overview/sagas"):
        anonymous = await client.get(path, headers={"Authorization": ""})
        assert anonymous.status_code == 401
        wrong = await client.get(path, headers={"Authorization": f"Bearer {commands}"})
        assert wrong.status_code == 403


async def test_the_overview_as_json(api: tuple[Console, httpx.AsyncClient]) -> None:
    _, client = api
    body = (await client.get("/overview/sagas")).json()
    assert body["stuck"] == 2 and body["in_flight"] == 3
    order = next(t for t in body["types"] if t["saga_type"] == "order")
    hour, day = order["windows"]
    assert (hour["compensated"], hour["failed"], day["failed"]) == (1, 0, 1)
    assert order["in_flight_by_status"]["AUTHORIZING"] == 1
    assert len(body["last_hour"]) == 12


async def test_the_list_filters_by_version_and_says_each_saga_s(
    api: tuple[Console, httpx.AsyncClient],
) -> None:
    console, client = api
    run_on_versions(console.engine)
    second = (await client.get("/sagas", params={"version": 2})).json()["sagas"]
    assert [(s["saga_id"], s["version"]) for s in second] == [
        ("o-stuck", 2),
        ("o-tie-01", 2),
        ("o-tie-00", 2),
        ("o-done", 2),
    ]
    every = (await client.get("/sagas", params={"limit": 500})).json()["sagas"]
    assert {s["saga_id"]: s["version"] for s in every if s["version"] != 1} == ON_OTHER_VERSIONS
    for wrong in (0, "two", 2**31):
        response = await client.get("/sagas", params={"version": wrong})
        assert response.status_code == 422 and "version" in response.json()["message"]


async def test_the_overview_as_json_counts_per_version_too(
    api: tuple[Console, httpx.AsyncClient],
) -> None:
    console, client = api
    run_on_versions(console.engine)
    body = (await client.get("/overview/sagas")).json()
    order = next(t for t in body["types"] if t["saga_type"] == "order")
    by_version = {v["version"]: v for v in order["versions"]}
    assert sorted(by_version) == [1, 2]
    assert (by_version[1]["stuck"], by_version[2]["stuck"]) == (0, 1) == (0, order["stuck"])
    assert by_version[2]["in_flight_by_status"]["AUTHORIZING"] == 1
    for field in ("in_flight", "finished", "compensated", "failed"):
        for i in (0, 1):
            total = sum(v["windows"][i][field] for v in order["versions"])
            assert total == order["windows"][i][field], (field, i)


async def test_the_openapi_document_describes_both(api: tuple[Console, httpx.AsyncClient]) -> None:
    _, client = api
    document = (await client.get("/openapi.json")).json()
    listing = document["paths"]["/sagas"]["get"]
    names = {p["name"] for p in listing["parameters"]}
    assert {"saga_type", "status", "outcome", "since", "customer", "product", "after"} <= names
    assert "422" in listing["responses"] and listing["security"]
    assert "/overview/sagas" in document["paths"]


# --- the command line ------------------------------------------------------------------


def _run(console: Console, monkeypatch: pytest.MonkeyPatch, *args: str) -> Result:
    url = str(console.engine.url)
    monkeypatch.setattr(cli, "_read_engine", lambda: create_read_engine(url))
    return CliRunner(mix_stderr=False).invoke(cli.main, ["sagas", *args])


async def test_cli_list_pages_with_the_same_filter(
    api: tuple[Console, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    console, _ = api
    first = _run(console, monkeypatch, "list", "--outcome", "finished", "--limit", "20")
    assert first.exit_code == 0, first.stderr
    rows = [line.split()[0] for line in first.stdout.splitlines()]
    assert len(rows) == 20
    command = first.stderr.strip().removeprefix("next page: sagaline sagas ").split()
    assert command[:5] == ["list", "--outcome", "finished", "--limit", "20"]
    second = _run(console, monkeypatch, *command)
    assert second.exit_code == 0, second.stderr
    more = [line.split()[0] for line in second.stdout.splitlines()]
    assert not set(rows) & set(more) and "e-ok" in more
    bad = _run(console, monkeypatch, "list", "--saga-type", "invoice")
    assert bad.exit_code != 0 and "There is no saga type “invoice”" in bad.stderr


async def test_cli_list_filters_by_version_and_prints_each_saga_s(
    api: tuple[Console, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    console, _ = api
    run_on_versions(console.engine)
    listed = _run(console, monkeypatch, "list", "--version", "3")
    assert listed.exit_code == 0, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines()] == [
        ["e-wait", "enrollment", "v3"]
    ]
    bad = _run(console, monkeypatch, "list", "--version", "0")
    assert bad.exit_code != 0 and "The version is the version of a saga" in bad.stderr


async def test_cli_show_marks_compensations(
    api: tuple[Console, httpx.AsyncClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    console, _ = api
    shown = _run(console, monkeypatch, "show", "o-comp")
    assert shown.exit_code == 0, shown.stderr
    out = shown.stdout
    assert out.startswith("order o-comp: CANCELLED (final)")
    assert "participants: order (o-comp), product (p1), payment (o-comp)" in out
    assert sum("COMPENSATION" in line for line in out.splitlines()) == 1
    missing = _run(console, monkeypatch, "show", "o-none")
    assert missing.exit_code != 0 and "no saga 'o-none'" in missing.stderr
