"""The console's saga list, overview numbers and charts, and the saga page's swimlanes
(issue 32), in-process over a migrated SQLite read side written with the read side's own
store functions: every filter, bad filters (a 400 page with a sentence), keyset paging
(no saga skipped or repeated, ties of the sort key included), and the SVG drawn from data.

The same list over HTTP (``GET /sagas``) and the CLI: tests/unit/test_api_sagas.py."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from sqlalchemy import Engine

from readside import schema, store
from sagas.contracts.orders import OrderLine
from sagas.projections.enrollments import ENROLLMENTS, EnrollmentRow
from sagas.projections.orders import ORDERS, OrderRow
from sagas.projections.rows import TimelineRow
from services.api import saga_list
from services.api.console import charts
from services.api.console.data import Step
from tests.unit.test_console import Console

pytestmark = pytest.mark.unit

NOW = datetime.now(UTC).replace(microsecond=0)
TIE = NOW - timedelta(minutes=10)
FILLED_AT = [NOW]
"""When :func:`fill` last wrote the rows (the times a filter names count back from it)."""
"""Many sagas changed at this very instant: paging must neither skip nor repeat one."""


def order(
    order_id: str,
    status: str,
    at: datetime,
    customer: str = "c-1",
    reason: str | None = None,
    started: datetime | None = None,
) -> OrderRow:
    return OrderRow(
        order_id=order_id,
        customer_id=customer,
        status=status,
        reason=reason,
        lines=(OrderLine(product_id="p1", quantity=1, unit_price=Decimal("10.00")),),
        total=Decimal("10.00"),
        payment_method="card",
        created_at=started or at - timedelta(seconds=2),
        updated_at=at,
        last_sequence=3,
    )


def enrollment(
    enrollment_id: str, status: str, at: datetime, student: str = "s-1"
) -> EnrollmentRow:
    return EnrollmentRow(
        enrollment_id=enrollment_id,
        student_id=student,
        course_id="k-1",
        status=status,
        waitlist_position=None,
        reason="course full" if status == "REJECTED" else None,
        created_at=at - timedelta(seconds=1),
        updated_at=at,
        last_sequence=2,
    )


def step(saga: str, key: str, seq: int, kind: str, at: datetime, summary: str) -> TimelineRow:
    return TimelineRow(
        saga_id=saga,
        entity_key=key,
        sequence=seq,
        event_type=kind,
        occurred_at=at,
        summary=summary,
    )


def fill(engine: Engine) -> None:
    """The rows, their times counted back from now: a saga's age (stuck or not) at the
    request is what it was written with, however long the suite ran before."""
    now = datetime.now(UTC).replace(microsecond=0)
    FILLED_AT[0] = now
    tie = now - (NOW - TIE)
    orders = [
        order("o-stuck", "AUTHORIZING", now - timedelta(minutes=5)),
        order("o-moving", "PENDING", now - timedelta(seconds=3)),
        order("o-done", "CONFIRMED", now - timedelta(minutes=20), customer="c-2"),
        order("o-comp", "CANCELLED", now - timedelta(minutes=30), reason="payment declined"),
        order("o-refused", "REJECTED", now - timedelta(hours=3), reason="out of stock"),
        order("o-old", "CONFIRMED", now - timedelta(days=3)),
        # 25 sagas changed at one instant, of both types (the sort key ties).
        *[order(f"o-tie-{i:02d}", "CONFIRMED", tie) for i in range(15)],
    ]
    enrollments = [
        enrollment("e-ok", "ENROLLED", now - timedelta(minutes=15)),
        enrollment("e-rej", "REJECTED", now - timedelta(minutes=40), student="s-2"),
        enrollment("e-wait", "PENDING", now - timedelta(hours=2)),
        *[enrollment(f"e-tie-{i:02d}", "ENROLLED", tie) for i in range(10)],
    ]
    t0 = now - timedelta(minutes=30, seconds=2)
    timeline = [
        step("o-comp", "order:o-comp", 1, "order.Placed", t0, "placed"),
        step("o-comp", "product:p1", 4, "ledger.Reserved", t0 + timedelta(seconds=0.2), "r 1"),
        step("o-comp", "payment:o-comp", 1, "payment.Declined", t0 + timedelta(seconds=1), "no"),
        step("o-comp", "product:p1", 5, "ledger.Released", t0 + timedelta(seconds=1.5), "rel"),
        step("o-comp", "order:o-comp", 2, "order.StatusChanged", t0 + timedelta(seconds=2), "X"),
        step("o-refused", "order:o-refused", 1, "order.Placed", t0, "placed"),
        step("o-refused", "product:p9", 1, "ledger.ReservationRejected", t0, "none left"),
    ]
    with engine.begin() as conn:
        store.save_rows(conn, ORDERS, orders)
        store.save_rows(conn, ENROLLMENTS, enrollments)
        store.add_timeline(conn, timeline)


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    c = Console(tmp_path, step_timeout_s=60.0)
    fill(c.engine)
    yield c
    c.engine.dispose()


def listed(page: str) -> list[str]:
    """The saga ids of a list page, in order."""
    table = page.split('id="saga-list"')[1].split("</table>")[0]
    return re.findall(r'<a href="/console/sagas/[^"]+"><code>([^<]+)</code>', table)


async def ids(client: httpx.AsyncClient, query: str) -> list[str]:
    response = await client.get(f"/console/sagas?{query}")
    assert response.status_code == 200, response.text
    return listed(response.text)


# --- the list --------------------------------------------------------------------------


async def test_every_saga_newest_change_first(console: Console) -> None:
    async with console.logged_in("read") as client:
        every = await ids(client, "limit=500")
    assert len(every) == 21 + 13
    assert every[:2] == ["o-moving", "o-stuck"]
    assert every[-1] == "o-old"
    # At the tied instant, by type (descending: order before enrollment), then id.
    ties = [i for i in every if "-tie-" in i]
    assert ties == sorted((i for i in ties if i.startswith("o")), reverse=True) + sorted(
        (i for i in ties if i.startswith("e")), reverse=True
    )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("saga_type=enrollment&limit=3", ["e-tie-09", "e-tie-08", "e-tie-07"]),
        ("status=AUTHORIZING", ["o-stuck"]),
        ("saga_type=order&status=PENDING", ["o-moving"]),
        ("outcome=stuck", ["o-stuck", "e-wait"]),
        ("outcome=in_flight", ["o-moving", "o-stuck", "e-wait"]),
        ("outcome=compensated", ["o-comp"]),
        ("outcome=failed", ["e-rej", "o-refused"]),
        ("customer=c-2", ["o-done"]),
        ("student=s-2", ["e-rej"]),
        ("course=k-1&outcome=in_flight", ["e-wait"]),
        ("product=p1", ["o-comp"]),
        ("entity=payment:o-comp", ["o-comp"]),
        ("entity=product:p9", ["o-refused"]),
        ("since=<-16m>&until=<-11m>&outcome=finished", ["e-ok"]),
        ("since=<-1440m>&until=<-60m>", ["e-wait", "o-refused"]),
        ("saga_type=order&status=DROPPED", None),
    ],
)
async def test_each_filter(console: Console, query: str, expected: list[str] | None) -> None:
    # <-16m>: 16 minutes before the rows' now, as a URL's time (one with an offset, one Z).
    for minutes in re.findall(r"<-(\d+)m>", query):
        at = FILLED_AT[0] - timedelta(minutes=int(minutes))
        text = at.isoformat() if int(minutes) < 60 else at.strftime("%Y-%m-%dT%H:%M:%SZ")
        query = query.replace(f"<-{minutes}m>", text)
    async with console.logged_in("read") as client:
        response = await client.get(f"/console/sagas?{query}")
    if expected is None:  # a status the type does not have is a bad filter
        assert response.status_code == 400
        return
    assert response.status_code == 200, response.text
    assert listed(response.text) == expected


@pytest.mark.parametrize("size", [1, 2, 3, 7, 25])
@pytest.mark.parametrize("query", ["", "outcome=finished", "saga_type=order"])
async def test_keyset_pages_skip_and_repeat_nothing(
    console: Console, size: int, query: str
) -> None:
    async with console.logged_in("read") as client:
        whole = await ids(client, f"{query}&limit=500")
        seen: list[str] = []
        url = f"/console/sagas?{query}&limit={size}"
        for _ in range(100):
            page = await client.get(url)
            assert page.status_code == 200, page.text
            found = listed(page.text)
            assert len(found) <= size
            seen += found
            following = re.search(r'href="([^"]+)" rel="next"', page.text)
            if following is None:
                break
            url = following.group(1).replace("&amp;", "&")
            # The next page's link keeps the filter (a pasted link shows the same list).
            for name, value in parse_qs(query).items():
                assert parse_qs(urlparse(url).query)[name] == value
    assert seen == whole
    assert len(set(seen)) == len(seen)


@pytest.mark.parametrize(
    ("query", "sentence"),
    [
        ("saga_type=invoice", "There is no saga type “invoice”"),
        ("status=LOST", "the statuses are"),
        ("outcome=sleeping", "There is no outcome"),
        ("since=yesterday", "is not a date and time"),
        ("since=0001-01-01T00:00:00%2B01:00", "is not a date and time"),
        ("since=2026-11-25T10:00:00Z&until=2026-11-25T09:00:00Z", "The time window is empty"),
        ("customer=c-1&saga_type=enrollment", "is about order sagas"),
        ("customer=c-1&student=s-1", "is about enrollment sagas"),
        ("product=p1&entity=course:k-1", "one entity at a time"),
        ("entity=p1", "an entity key"),
        ("after=bm90LWEtY3Vyc29y", "cursor is not one this list made"),
        ("after=%25%25%25", "cursor is not one this list made"),
        ("limit=0", "The limit must be"),
        ("limit=9999", "The limit must be"),
        ("limit=ten", "The limit must be"),
        ("limit=%C2%B2", "The limit must be"),  # "²": str.isdigit() takes it, int() not
        ("colour=red", "There is no filter “colour”"),
        ("customer=%00", "control characters"),
        ("customer=" + "x" * 201, "longer than 200"),
        ("status=PENDING&status=CONFIRMED", "given twice"),
        ("status=CONFIRMED&outcome=in_flight", "never in the outcome"),
        ("saga_type=%3Cscript%3E", "There is no saga type"),
    ],
)
async def test_a_bad_filter_is_a_400_page_with_a_sentence(
    console: Console, query: str, sentence: str
) -> None:
    async with console.logged_in("read") as client:
        response = await client.get(f"/console/sagas?{query}")
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("text/html")
    alert = re.search(r'role="alert">([^<]*(?:<[^/][^<]*)*)', response.text)
    assert alert is not None and sentence in response.text, response.text
    assert "<script>" not in response.text


async def test_the_list_needs_a_login(console: Console) -> None:
    async with console.client() as client:
        response = await client.get("/console/sagas?outcome=stuck")
    assert response.status_code == 303
    assert response.headers["location"] == "/console/login"


# --- the overview ----------------------------------------------------------------------


async def test_the_overview_says_stuck_first_and_counts_each_outcome(console: Console) -> None:
    async with console.logged_in("read") as client:
        page = (await client.get("/console")).text
    main = page.split('<main id="main"')[1]
    # The first number on the page is the stuck sagas, linking to them.
    first = re.search(r"<strong>(\d+)</strong>", main)
    assert first is not None and first.group(1) == "2"
    assert main.index("stuck</a>") < main.index("Projection lag")
    assert 'href="/console/sagas?outcome=stuck"' in main
    row = main.split('<th scope="row"><a href="/console/sagas?saga_type=order">order</a></th>')[1]
    cells = re.findall(r"<td>(?:<a[^>]*>)?(\d+)", row.split("</tr>")[0])
    # stuck, in flight now, then last hour (in flight, finished, compensated, failed),
    # then last day: o-refused (3 h ago) counts in the day only, o-old in neither.
    assert cells[:2] == ["1", "2"]
    assert cells[2:6] == ["2", "16", "1", "0"]
    assert cells[6:10] == ["2", "16", "1", "1"]
    counts = saga_list.overview
    assert counts is not None


async def test_the_overview_draws_throughput_and_latency_from_the_rows(console: Console) -> None:
    async with console.logged_in("read") as client:
        page = (await client.get("/console")).text
    throughput = page.split('<svg class="chart throughput"')[1].split("</svg>")[0]
    # 17 orders and 12 enrollments settled in the last hour: the ties, o-done, e-ok, and
    # the failed ones, settled too (o-comp, e-rej).
    assert "29 saga(s) reached a settled status in the last hour" in throughput
    assert throughput.count('class="bar s0"') >= 2 and 'class="bar s1"' in throughput
    assert "order: 15 settled" in throughput  # the tied orders, in one bucket
    latency = page.split('<svg class="chart latency"')[1].split("</svg>")[0]
    assert "p95 2000 ms" in latency and "p50 1000 ms" in latency
    assert "<polyline" in latency or latency.count("<circle") >= 2


# --- the saga page ---------------------------------------------------------------------


async def test_the_saga_page_draws_a_lane_per_participant_and_marks_compensations(
    console: Console,
) -> None:
    async with console.logged_in("read") as client:
        page = (await client.get("/console/sagas/o-comp")).text
    svg = page.split('<svg class="chart swimlanes"')[1].split("</svg>")[0]
    lanes = re.findall(r'data-lane="([^"]+)"', svg)
    assert lanes == ["order", "product", "payment"]  # the saga's own lane first
    assert svg.count('class="mark compensation"') == 1
    assert "Compensation: #4 ledger.Released on product:p1" in svg
    assert svg.count('class="mark step"') == 4
    assert "5 step(s) across 3 participant(s): order, product, payment; 1 compensation(s)" in svg
    # The table stays, below the chart.
    assert page.index("<svg") < page.index('<table class="timeline">')


def test_swimlanes_escape_what_they_draw() -> None:
    hostile = '<script>alert("x")</script>'
    steps = [
        Step(NOW, None, f"order:{hostile}", "order.Placed", hostile, False),
        Step(NOW, timedelta(0), "stock:p1", "ledger.Released", "x", True),
    ]
    svg = str(charts.swimlanes(steps, "order"))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.count('<g class="lane"') == 2


def test_a_long_saga_fits_its_chart() -> None:
    steps = [
        Step(NOW + timedelta(seconds=i), None, f"product:p{i}", "ledger.Reserved", "r", False)
        for i in range(300)
    ]
    svg = str(charts.swimlanes(steps, "order"))
    width = int(re.search(r'viewBox="0 0 (\d+)', svg).group(1))  # type: ignore[union-attr]
    assert width <= 120 + 8 * 300 + 16
    assert re.findall(r'data-lane="([^"]+)"', svg) == ["order", "product"]
    assert "p0, p1 +298" in svg


def test_search_looks_in_the_indexed_ids_only() -> None:
    # The list's indexes lead with updated_at and status: a search compares ids, never
    # a time (PostgreSQL refuses timestamp = text) or a status.
    from services.api.console import data

    assert data.searched_columns() == ["customer_id", "student_id", "course_id"]


# --- versions: the list filtered by one, the overview split by them -------------------------

ON_OTHER_VERSIONS = {"o-stuck": 2, "o-done": 2, "o-tie-00": 2, "o-tie-01": 2, "e-wait": 3}
"""The sagas :func:`run_on_versions` puts on a later version (every other one is on 1)."""


def run_on_versions(engine: Engine) -> None:
    with engine.begin() as conn:
        for saga in saga_list.SAGA_TYPES:
            t = schema.table_of(saga.model)
            for saga_id, version in ON_OTHER_VERSIONS.items():
                where = t.c[saga.model.key] == saga_id
                conn.execute(t.update().where(where).values({saga.version_column: version}))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("version=2", ["o-stuck", "o-tie-01", "o-tie-00", "o-done"]),
        ("version=2&status=AUTHORIZING", ["o-stuck"]),
        ("version=2&outcome=finished", ["o-tie-01", "o-tie-00", "o-done"]),
        ("version=1&saga_type=order&outcome=in_flight", ["o-moving"]),
        ("version=3", ["e-wait"]),
        ("version=3&outcome=stuck", ["e-wait"]),
        ("version=2&saga_type=enrollment", []),
        ("version=4", []),
        ("version=+2", ["o-stuck", "o-tie-01", "o-tie-00", "o-done"]),
    ],
)
async def test_the_version_filter_lists_the_sagas_on_that_version(
    console: Console, query: str, expected: list[str]
) -> None:
    run_on_versions(console.engine)
    async with console.logged_in("read") as client:
        assert await ids(client, query) == expected


async def test_version_1_lists_every_other_saga_and_pages_through_them_once(
    console: Console,
) -> None:
    run_on_versions(console.engine)
    async with console.logged_in("read") as client:
        every = await ids(client, "limit=500")
        first = await ids(client, "version=1&limit=500")
        seen: list[str] = []
        url = "/console/sagas?version=1&limit=4"
        while url:
            page = await client.get(url)
            seen += listed(page.text)
            following = re.search(r'href="([^"]+)" rel="next"', page.text)
            url = following.group(1).replace("&amp;", "&") if following else ""
            assert not following or "version=1" in url
    assert first == [i for i in every if i not in ON_OTHER_VERSIONS]
    assert seen == first


async def test_the_list_shows_each_saga_s_version_linking_to_its_type_s_sagas_on_it(
    console: Console,
) -> None:
    run_on_versions(console.engine)
    async with console.logged_in("read") as client:
        page = (await client.get("/console/sagas?outcome=stuck")).text
    table = page.split('id="saga-list"')[1].split("</table>")[0]
    assert '<th scope="col">Version</th>' in table
    shown = re.findall(
        r'class="id"><a [^>]+><code>([^<]+)</code>.*?'
        r'data-label="Version" class="version"><a href="([^"]+)">(\d+)<',
        table,
        re.S,
    )
    assert shown == [
        ("o-stuck", "/console/sagas?saga_type=order&amp;version=2", "2"),
        ("e-wait", "/console/sagas?saga_type=enrollment&amp;version=3", "3"),
    ]
    assert 'id="f-version"' in page  # the filter's field


@pytest.mark.parametrize("version", ["0", "-1", "two", "2.0", "2147483648", "1" * 30])
async def test_a_version_that_is_not_one_is_a_400_page_with_a_sentence(
    console: Console, version: str
) -> None:
    async with console.logged_in("read") as client:
        response = await client.get("/console/sagas", params={"version": version})
    assert response.status_code == 400, response.text
    assert "The version is the version of a saga" in response.text
    assert "a whole number from 1 to 2147483647" in response.text


def test_the_filter_parses_a_version_and_says_what_is_wrong_with_another() -> None:
    assert saga_list.parse({"version": "3"}).version == 3
    assert saga_list.parse({"version": " 12 "}).version == 12
    assert saga_list.parse({"version": ""}).version is None
    assert saga_list.parse({}).version is None
    assert saga_list.parse({"version": "2", "limit": "5"}).query() == {"version": "2", "limit": "5"}
    for wrong in ("0", "x", "2147483648", "3e2", "²", "1²"):  # "²".isdigit(); int() refuses it
        with pytest.raises(saga_list.FilterError, match="a whole number from 1 to 2147483647"):
            saga_list.parse({"version": wrong})


async def test_the_overview_counts_each_saga_type_per_version_too(console: Console) -> None:
    run_on_versions(console.engine)
    async with console.logged_in("read") as client:
        page = (await client.get("/console")).text
    main = page.split('<main id="main"')[1]

    def cells(row_id: str) -> list[str]:
        row = main.split(f'id="{row_id}"')[1].split("</tr>")[0]
        return re.findall(r"<td>(?:<a[^>]*>)?(\d+)", row)

    # stuck, in flight now, the last hour's and the last day's in flight, finished,
    # compensated, failed: the type's row (as before) is the sum of its versions' rows
    assert cells("counts-order-v1") == ["0", "1", "1", "13", "1", "0", "1", "13", "1", "1"]
    assert cells("counts-order-v2") == ["1", "1", "1", "3", "0", "0", "1", "3", "0", "0"]
    assert cells("counts-enrollment-v3") == ["1", "1", "0", "0", "0", "0", "1", "0", "0", "0"]
    assert "counts-order-v3" not in main and "counts-enrollment-v2" not in main
    assert 'href="/console/sagas?saga_type=order&amp;version=2&amp;outcome=stuck"' in main
    assert ">order version 2</a>" in main


async def test_the_saga_page_links_to_the_sagas_trace_only_with_tracing_on(
    console: Console,
) -> None:
    async with console.logged_in("read") as client:
        assert 'id="saga-trace"' not in (await client.get("/console/sagas/o-comp")).text
        console.app.state.settings = console.settings.model_copy(
            update={"tracing": True, "tracing_ui_url": "http://jaeger.test:16686/"}
        )
        page = (await client.get("/console/sagas/o-comp")).text
    [href] = re.findall(r'<a href="([^"]+)" id="saga-trace"', page)
    url = httpx.URL(html.unescape(href))
    assert (url.host, url.port, url.path) == ("jaeger.test", 16686, "/search")
    assert url.params["service"] == "sagaline-worker"
    assert json.loads(url.params["tags"]) == {"sagaline.saga.id": "o-comp"}
    # the window holds every step (the first 30 min 2 s ago, the last 2 s later)
    first = FILLED_AT[0] - timedelta(minutes=30, seconds=2)
    start, end = int(url.params["start"]), int(url.params["end"])
    assert start < first.timestamp() * 1e6 < (first + timedelta(seconds=2)).timestamp() * 1e6 < end
