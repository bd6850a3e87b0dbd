"""The saga console's door and its pages, in-process over a migrated SQLite read side:
login (cookie flags, wrong keys, scopes), the form checks on every POST, hostile ids and
searches (a 4xx page with a sentence, everything escaped), and what each page shows from
rows written with the read side's own store functions.

Sessions, their expiry and revocation: tests/unit/test_console_sessions.py. The dead-letter
page over a counting fake of the topic: tests/unit/test_console_deadletters.py; against the
real broker: tests/integration/test_console_browser.py."""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import BigInteger, DateTime, Engine, String, Text, column, insert, table

from readside import store
from readside.engine import create_read_engine
from readside.migrate import upgrade
from runtime.settings import Settings
from sagas.contracts.orders import OrderLine
from sagas.projections.enrollments import ENROLLMENTS, EnrollmentRow
from sagas.projections.orders import ORDERS, OrderRow
from sagas.projections.rows import TimelineRow
from services.api.app import create_api
from services.api.console import session
from services.api.inflight import InFlight
from services.inflight import ChannelVersions
from services.keys import add_key, revoke_key

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>'


class NoEnds:
    """End offsets as a broker that is away answers them (the lag shows as unknown)."""

    async def get(self, topic: str) -> dict[int, int] | None:
        return None

    async def close(self) -> None:
        return None


class Console:
    def __init__(self, tmp: Path, **overrides: Any) -> None:
        self.keys = tmp / "api-keys"
        self.settings = Settings(
            api_keys_file=self.keys, console_sessions_dir=tmp / "sessions", **overrides
        )
        self.app = create_api(self.settings, bus=object())  # type: ignore[arg-type]
        url = f"sqlite:///{tmp / 'read.db'}"
        upgrade(url)
        self.engine: Engine = create_read_engine(url)
        self.app.state.engine = self.engine
        self.app.state.end_offsets = NoEnds()

    def key(self, *scopes: str) -> str:
        key, _ = add_key(self.keys, scopes, "test")
        return key

    def client(self, origin: str = "http://console.test") -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app),
            base_url=origin,
            follow_redirects=False,
        )

    @asynccontextmanager
    async def logged_in(
        self, *scopes: str, origin: str = "http://console.test"
    ) -> AsyncIterator[httpx.AsyncClient]:
        async with self.client(origin) as client:
            response = await client.post("/console/login", data={"api_key": self.key(*scopes)})
            assert response.status_code == 303, response.text
            yield client


async def form_token(client: httpx.AsyncClient) -> str:
    """The form token the console's pages carry for this client's session (the logout form
    is on every page)."""
    page = (await client.get("/console/login")).text
    return page.split('name="form_token" value="')[1].split('"')[0]


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    c = Console(tmp_path)
    yield c
    c.engine.dispose()


def _order(order_id: str, customer: str, status: str, reason: str | None, at: datetime) -> OrderRow:
    return OrderRow(
        order_id=order_id,
        customer_id=customer,
        status=status,
        reason=reason,
        lines=(OrderLine(product_id="p1", quantity=1, unit_price=Decimal("10.00")),),
        total=Decimal("10.00"),
        payment_method="card",
        created_at=at,
        updated_at=at,
        last_sequence=3,
    )


def _fill(engine: Engine) -> None:
    declined = "payment declined: method decline"
    with engine.begin() as conn:
        store.save_rows(
            conn,
            ORDERS,
            [
                _order("o-ok", "c-1", "CONFIRMED", None, T0),
                _order("o-bad", "c-1", "CANCELLED", declined, T0 + timedelta(seconds=5)),
                _order("o-odd", "c-2", "REJECTED", HOSTILE, T0 + timedelta(seconds=9)),
            ],
        )
        store.save_rows(
            conn,
            ENROLLMENTS,
            [
                EnrollmentRow(
                    enrollment_id="e-1",
                    student_id="s-1",
                    course_id="k-1",
                    status="REJECTED",
                    waitlist_position=None,
                    reason="course full",
                    created_at=T0,
                    updated_at=T0 + timedelta(seconds=2),
                    last_sequence=2,
                )
            ],
        )
        steps = [
            ("order:o-bad", 1, "order.Placed", "placed", 0.0),
            ("product:p1", 4, "ledger.Reserved", "reserved 1", 0.2),
            ("order:o-bad", 2, "payment.Declined", "payment declined", 1.5),
            ("product:p1", 5, "ledger.Released", "released 1 (payment declined)", 1.7),
            ("order:o-bad", 3, "order.StatusChanged", "CANCELLED: " + declined, 1.8),
        ]
        store.add_timeline(
            conn,
            [
                TimelineRow(
                    saga_id="o-bad",
                    entity_key=key,
                    sequence=seq,
                    event_type=kind,
                    occurred_at=T0 + timedelta(seconds=s),
                    summary=summary,
                )
                for key, seq, kind, summary, s in steps
            ],
        )


# --- the door --------------------------------------------------------------------------


async def test_pages_send_a_visitor_without_a_key_to_the_login_page(console: Console) -> None:
    async with console.client() as client:
        for path in ("/console", "/console/failures", "/console/sagas/o-1", "/console/search?q=x"):
            response = await client.get(path)
            assert response.status_code == 303, path
            assert response.headers["location"] == "/console/login"
        page = await client.get("/console/login")
        assert page.status_code == 200
        assert 'type="password"' in page.text and 'name="api_key"' in page.text
        assert "never kept" in page.text and "30 minutes unused" in page.text


async def test_login_gives_a_strict_httponly_cookie_never_a_url(
    console: Console,
) -> None:
    key = console.key("read")
    async with console.client() as client:
        response = await client.post("/console/login", data={"api_key": key})
        assert response.status_code == 303
        assert response.headers["location"] == "/console"
        cookie = response.headers["set-cookie"]
        assert cookie.startswith(f"{session.COOKIE}=")
        assert key not in cookie
        flags = {f.strip().lower() for f in cookie.split(";")[1:]}
        assert {"httponly", "samesite=strict", "path=/console"} <= flags
        assert "secure" not in flags  # plain http here; https below
        assert key not in response.headers["location"]
        home = await client.get("/console")
        assert home.status_code == 200 and "Overview" in home.text
        assert key not in home.text
    async with console.client("https://console.test") as client:
        response = await client.post("/console/login", data={"api_key": key})
        assert "secure" in response.headers["set-cookie"].lower()


async def test_a_wrong_or_revoked_key_is_a_page_with_a_sentence(console: Console) -> None:
    async with console.client() as client:
        wrong = await client.post("/console/login", data={"api_key": "sgl_000000000000_nope"})
        assert wrong.status_code == 401
        assert "not valid here" in wrong.text and "set-cookie" not in wrong.headers
        nothing = await client.post("/console/login", data={"api_key": ""})
        assert nothing.status_code == 401
    async with console.logged_in("read") as client:
        key_id = (await client.get("/console")).text.split("<code>")[1].split("</code>")[0]
        revoke_key(console.keys, key_id)
        assert (await client.get("/console")).status_code == 303  # logged out at once


async def test_login_tries_are_throttled_as_the_apis_key_checks_are(tmp_path: Path) -> None:
    throttled = Console(tmp_path, api_key_failures_burst=2, api_key_failures_per_s=0.01)
    valid = throttled.key("read")
    wrong = valid[:-4] + ("AAAA" if not valid.endswith("AAAA") else "BBBB")  # well formed
    try:
        async with throttled.client() as client:
            answers = [
                (await client.post("/console/login", data={"api_key": wrong})).status_code
                for _ in range(3)
            ]
            assert answers == [401, 401, 429]
            refused = await client.post("/console/login", data={"api_key": valid})
            assert refused.status_code == 429  # this address spent its tries: no check runs
            assert (
                "not valid" in html.unescape(refused.text) and "set-cookie" not in refused.headers
            )
    finally:
        throttled.engine.dispose()


async def test_a_key_without_read_cannot_log_in(console: Console) -> None:
    async with console.client() as client:
        response = await client.post("/console/login", data={"api_key": console.key("commands")})
        assert response.status_code == 403
        assert "no 'read' scope" in html.unescape(response.text)


async def test_login_from_another_origin_is_refused(console: Console) -> None:
    async with console.client() as client:
        response = await client.post(
            "/console/login",
            data={"api_key": console.key("read")},
            headers={"Origin": "https://evil.example"},
        )
        assert response.status_code == 403 and "set-cookie" not in response.headers
        cross = await client.post(
            "/console/login",
            data={"api_key": console.key("read")},
            headers={"Sec-Fetch-Site": "cross-site"},
        )
        assert cross.status_code == 403
        opaque = await client.post(
            "/console/login", data={"api_key": console.key("read")}, headers={"Origin": "null"}
        )
        assert opaque.status_code == 403
        # Behind a proxy that ends TLS, the browser's https origin names our host: accepted.
        proxied = await client.post(
            "/console/login",
            data={"api_key": console.key("read")},
            headers={"Origin": "https://console.test"},
        )
        assert proxied.status_code == 303


async def test_a_redrive_needs_the_form_token_the_origin_and_the_admin_scope(
    console: Console,
) -> None:
    async with console.logged_in("read", "admin") as other:
        theirs = await form_token(other)  # another session's token
    async with console.logged_in("read") as reader:
        refused = await reader.post("/console/deadletters/0/redrive", data={"form_token": theirs})
        assert refused.status_code == 403 and "did not come from" in refused.text
    async with console.logged_in("read", "admin") as admin:
        good = await form_token(admin)
        no_token = await admin.post("/console/deadletters/0/redrive", data={"force": "yes"})
        assert no_token.status_code == 403
        foreign = await admin.post(
            "/console/deadletters/0/redrive",
            data={"form_token": good},
            headers={"Origin": "https://evil.example"},
        )
        assert foreign.status_code == 403
        not_form = await admin.post("/console/deadletters/0/redrive", json={"form_token": good})
        assert not_form.status_code == 415
        hostile = await admin.post(
            "/console/deadletters/1%3Cb%3E/redrive", data={"form_token": good}
        )
        assert hostile.status_code == 404 and "<b>" not in hostile.text
    async with console.logged_in("read") as reader:
        own = await form_token(reader)
        no_admin = await reader.post("/console/deadletters/0/redrive", data={"form_token": own})
        assert no_admin.status_code == 403 and "'admin' scope" in html.unescape(no_admin.text)


async def test_logout_forgets_the_cookie_and_ends_the_session(console: Console) -> None:
    async with console.logged_in("read", "admin") as client:
        token = await form_token(client)
        old = client.cookies[session.COOKIE]
        out = await client.post("/console/logout", data={"form_token": token})
        assert out.status_code == 303
        assert (
            'sagaline_console=""' in out.headers["set-cookie"]
            or "Max-Age=0" in out.headers["set-cookie"]
        )
    # The old cookie value, replayed (kept by an attacker, or a browser that ignored the
    # deletion), opens nothing: the session is over on the server.
    async with console.client() as replay:
        replay.cookies.set(session.COOKIE, old, path="/console")
        page = await replay.get("/console")
        assert page.status_code == 303 and page.headers["location"] == "/console/login"
        form = await replay.post("/console/deadletters/0/redrive", data={"form_token": token})
        assert form.status_code == 401 and "Log in first" in form.text


# --- hostile input ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/console/search?q=%00",
        "/console/search?q=" + "x" * 201,
        "/console/search?q=a%0Ab",
        "/console/search?q=",
        "/console/search?q=%20%20",
        "/console/sagas/%00",
        "/console/sagas/" + "y" * 300,
        "/console/failures?saga_type=" + "%3Cscript%3E",
        "/console/failures?reason=%07",
    ],
)
async def test_hostile_input_is_a_400_page_with_a_sentence(console: Console, path: str) -> None:
    async with console.logged_in("read") as client:
        response = await client.get(path)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("text/html")
    assert re.search(r'role="alert">[A-Z].+\.</p>', response.text)
    assert "<script>" not in response.text


async def test_unknown_ids_and_pages_are_404_pages_and_escaped(console: Console) -> None:
    _fill(console.engine)
    async with console.logged_in("read") as client:
        for path in (
            f"/console/search?q={HOSTILE}",
            f"/console/sagas/{HOSTILE}",
            "/console/nothing/here",
            "/console/sagas/a/b",
        ):
            response = await client.get(path)
            assert response.status_code == 404, path
            assert response.headers["content-type"].startswith("text/html")
            assert "<script>" not in response.text
        slash = await client.get("/console/")
        assert slash.status_code == 308 and slash.headers["location"] == "/console"
        escaped = await client.get(f"/console/search?q={HOSTILE}")
        assert "&lt;script&gt;" in escaped.text


async def test_every_page_has_a_strict_content_security_policy(console: Console) -> None:
    async with console.logged_in("read") as client:
        for path in ("/console", "/console/failures", "/console/login", "/console/nope"):
            response = await client.get(path)
            assert "default-src 'none'" in response.headers["content-security-policy"], path
            assert response.headers["cache-control"] == "no-store"
        css = await client.get("/console/console.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


# --- what the pages show ---------------------------------------------------------------


async def test_a_saga_page_shows_its_timeline_with_compensations_and_its_row(
    console: Console,
) -> None:
    _fill(console.engine)
    async with console.logged_in("read") as client:
        found = await client.get("/console/search?q=o-bad")
        assert found.status_code == 303
        assert found.headers["location"] == "/console/sagas/o-bad"
        page = await client.get("/console/sagas/o-bad")
    assert page.status_code == 200
    text = page.text
    assert 'id="saga-status">CANCELLED' in text
    assert "payment declined: method decline" in text
    assert text.count('class="compensation"') == 1  # ledger.Released, declared COMPENSATION
    assert "+200 ms" in text and "+1.3 s" in text  # the time since the previous step
    assert '<th scope="row">customer_id</th><td>c-1</td>' in text
    assert '<main id="main"' in text and "<h1>" in text and 'lang="en"' in text


async def test_search_by_another_indexed_id_lists_the_sagas(console: Console) -> None:
    _fill(console.engine)
    async with console.logged_in("read") as client:
        customer = await client.get("/console/search?q=c-1")
        student = await client.get("/console/search?q=s-1")
    assert customer.status_code == 200
    assert customer.text.index("o-bad") < customer.text.index("o-ok")  # newest first
    assert "customer_id" in customer.text
    assert "e-1" in student.text and "student_id" in student.text


async def test_failed_sagas_of_every_declared_type_filtered_by_type_and_reason(
    console: Console,
) -> None:
    _fill(console.engine)
    async with console.logged_in("read") as client:
        every = (await client.get("/console/failures")).text
        orders = (await client.get("/console/failures?saga_type=order")).text
        declined = (
            await client.get(
                "/console/failures", params={"reason": "payment declined: method decline"}
            )
        ).text
    for saga_id in ("o-bad", "o-odd", "e-1"):
        assert f">{saga_id}</a>" in every
    assert ">o-ok</a>" not in every  # CONFIRMED is not a failure
    assert ">e-1</a>" not in orders and ">o-bad</a>" in orders
    assert ">o-bad</a>" in declined and ">o-odd</a>" not in declined
    assert HOSTILE not in every and "&lt;script&gt;" in every  # a reason is escaped too


async def test_the_overview_shows_lag_and_the_last_rebuild(console: Console) -> None:
    async with console.logged_in("read") as client:
        before = (await client.get("/console")).text
        assert "No rebuild has swapped" in before and "lag unknown" in before
        assert "does not read the saga tables" in before  # no reading outside the lifespan
        runs = table(
            "rebuild_runs",
            column("run_id", String),
            column("topic", String),
            column("started_at", DateTime(timezone=True)),
            column("swapped_at", DateTime(timezone=True)),
            column("offsets", Text),
            column("caught_up", Text),
            column("events_read", BigInteger),
            column("rows", Text),
        )
        with console.engine.begin() as conn:
            conn.execute(
                insert(runs).values(
                    run_id="run-1",
                    topic="sagaline.events",
                    started_at=T0,
                    swapped_at=T0 + timedelta(seconds=42.5),
                    offsets="{}",
                    caught_up="{}",
                    events_read=1234,
                    rows=json.dumps({"orders": 7, "product_stock": 2}),
                )
            )
        after = (await client.get("/console")).text
        failures = table(
            "rebuild_failures",
            column("run_id", String),
            column("topic", String),
            column("started_at", DateTime(timezone=True)),
            column("failed_at", DateTime(timezone=True)),
            column("stage", String),
            column("error", Text),
        )
        with console.engine.begin() as conn:
            conn.execute(
                insert(failures).values(
                    run_id="run-2",
                    topic="sagaline.events",
                    started_at=T0 + timedelta(hours=1),
                    failed_at=T0 + timedelta(hours=1, seconds=3),
                    stage="offsets",
                    error=f"TopicMissing: {HOSTILE}",
                )
            )
        failed = (await client.get("/console")).text
    assert "42.5 s" in after and "1234" in after and "run-1" in after
    assert '<th scope="row">orders</th><td>7</td>' in after
    assert "<strong>failed</strong>" not in after
    assert "<strong>failed</strong> at 2026-11-23 07:00:03.000 UTC" in failed
    assert "<code>offsets</code>" in failed and "&lt;script&gt;" in failed
    assert "42.5 s" in failed  # the models are still those of the swapped run


async def test_the_overview_shows_the_sagas_in_flight_by_version(console: Console) -> None:
    def read() -> list[ChannelVersions]:
        return [
            ChannelVersions("order-saga", 3, (1, 2), Counter({1: 0, 2: 4, 3: 7})),
            ChannelVersions("enrollment-saga", 1, (), Counter({1: 2})),
        ]

    console.app.state.in_flight = InFlight(read, 60.0, console.app.state.prometheus)
    async with console.logged_in("read") as client:
        page = (await client.get("/console")).text
    rows = re.findall(
        r'<tr><th scope="row">([\w-]+)</th><td>(\d+)</td><td>(\d+)</td><td>([^<]*)</td></tr>', page
    )
    assert rows == [
        ("order-saga", "1", "0", "none in flight: it can be deleted"),
        ("order-saga", "2", "4", "4 in flight: keep it"),
        ("order-saga", "3", "7", "7 in flight (new instances start here)"),
        ("enrollment-saga", "1", "2", "2 in flight (new instances start here)"),
    ]
    assert "SAGALINE_IN_FLIGHT_REFRESH_S" in page


async def test_with_auth_off_the_console_is_open(tmp_path: Path) -> None:
    console = Console(tmp_path, api_auth=False)
    try:
        async with console.client() as client:
            assert (await client.get("/console")).status_code == 200
            login = await client.get("/console/login")
            assert "API auth is off" in login.text
    finally:
        console.engine.dispose()
