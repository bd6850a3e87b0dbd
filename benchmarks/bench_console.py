"""The console's pages and the saga list API at a million sagas (issue 32).

    python benchmarks/bench_console.py [--sagas 1000000] [--requests 50] [--keep]

1. Creates a fresh PostgreSQL database on the local cluster (deploy/local/postgres.sh,
   ``faults.stack.local_pg_url()``: the password from .local/pg/pgpass) and migrates it.
2. Fills it with COPY: ``--sagas`` sagas (70% orders over 100,000 customers and 1,000
   products, 30% enrollments over 50,000 students and 2,000 courses), their last change
   spread evenly over 30 days (about 1,400 an hour); orders 85% CONFIRMED, 6% CANCELLED,
   4% REJECTED, 5% in flight (PENDING, AUTHORIZING, CONFIRMING, CAPTURING); enrollments
   75% ENROLLED, 5% WAITLISTED, 8% DROPPED, 7% REJECTED, 5% in flight; four timeline rows
   a saga (the saga's start and end, a participant's step, the payment or the student's),
   a fifth, a compensation, for every CANCELLED order and half the REJECTED ones. Then
   VACUUM ANALYZE (what autovacuum does to a table this size within minutes).
3. Serves the real API app (the console and the REST routes, auth on: a session cookie for
   the console, a bearer key for the API) in this process through httpx's ASGI transport,
   and times ``--requests`` requests of each page and call, one at a time, each with other
   ids or filters where the page takes one. No broker: the overview's lag reader answers
   "unknown" at once (what is timed is the database and the page, not a Kafka round trip).
   The overview's "Versions in flight" cache (``services.api.inflight``) is the app's own,
   its bootstrap a local port nothing listens on (``--no-broker``): each reading is refused
   at once and the overview shows the last one (none) with the failure.
4. Also times the saga definitions' pictures (``/console/definitions`` and each type's) and
   the operator actions' GET pages: the form of a compensation over a filter
   (``/console/actions/new?...``) and one recorded dry run's page (``/console/actions/<id>``),
   planned once before the timing through ``services.operator.actions.dry_run`` over a small
   filter (one product's orders in flight on version 1: a few dozen sagas). No action is
   executed. Every tenth saga is on version 2 of its definition (the overview then has a
   row per version); the list filtered by version is timed too.

No transfers are generated (the third domain's tables stay empty; its definition page
counts nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import git_rev, machine, percentile
from faults.stack import local_pg_url
from readside.engine import create_read_engine
from readside.migrate import upgrade
from runtime.settings import Settings
from services.api.app import create_api
from services.api.inflight import in_flight_of
from services.keys import add_key
from services.operator import actions as ops
from services.operator.definitions import definitions

NOW = datetime.now(UTC)
SPAN = timedelta(days=30)
CUSTOMERS, PRODUCTS, STUDENTS, COURSES = 100_000, 1_000, 50_000, 2_000
ORDER_STATUSES = [("CONFIRMED", 85), ("CANCELLED", 6), ("REJECTED", 4)] + [
    (s, 1.25) for s in ("PENDING", "AUTHORIZING", "CONFIRMING", "CAPTURING")
]
ENROLLMENT_STATUSES = [
    ("ENROLLED", 75),
    ("WAITLISTED", 5),
    ("DROPPED", 8),
    ("REJECTED", 7),
    ("PENDING", 4),
    ("TRANSFERRING", 1),
]


class NoEnds:
    async def get(self, topic: str) -> dict[int, int] | None:
        return None

    async def close(self) -> None:
        return None


def _picker(weights: list[tuple[str, float]], rng: random.Random) -> Callable[[], str]:
    names = [n for n, _ in weights]
    cum = []
    total = 0.0
    for _, w in weights:
        total += w
        cum.append(total)

    def pick() -> str:
        return rng.choices(names, cum_weights=cum)[0]

    return pick


def _version(i: int) -> int:
    """Every tenth saga on version 2 of its definition, the rest on version 1: a deploy of a
    new version while the older one's instances are still there (no random draw, so the
    other columns are drawn as before versions)."""
    return 2 if i % 10 == 0 else 1


def fill(url: str, sagas: int) -> dict[str, float]:
    """COPY the sagas in; seconds per stage."""
    import psycopg

    rng = random.Random(32)
    orders = int(sagas * 0.7)
    order_status = _picker(ORDER_STATUSES, rng)
    enrollment_status = _picker(ENROLLMENT_STATUSES, rng)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    took: dict[str, float] = {}
    started = time.perf_counter()
    # One COPY at a time per connection: the timeline goes through a second one.
    with (
        psycopg.connect(dsn) as conn,
        conn.cursor() as cur,
        psycopg.connect(dsn) as conn2,
        conn2.cursor() as cur2,
    ):
        with (
            cur.copy(
                "COPY orders (order_id, customer_id, status, reason, lines, total, "
                "payment_method, created_at, updated_at, last_sequence, version) FROM STDIN"
            ) as orders_copy,
            cur2.copy(
                "COPY saga_timeline (saga_id, entity_key, sequence, event_type, occurred_at, "
                "summary) FROM STDIN"
            ) as timeline,
        ):
            for i in range(orders):
                oid = f"o-{i:07d}"
                status = order_status()
                at = NOW - SPAN * rng.random()
                start = at - timedelta(milliseconds=rng.randint(80, 2500))
                product = f"p-{rng.randrange(PRODUCTS):04d}"
                reason = {"CANCELLED": "payment declined: method decline"}.get(status)
                if status == "REJECTED":
                    reason = f"product {product} out of stock"
                line = f'[{{"product_id":"{product}","quantity":1,"unit_price":"10.00"}}]'
                orders_copy.write_row(
                    (
                        oid,
                        f"c-{rng.randrange(CUSTOMERS):06d}",
                        status,
                        reason,
                        line,
                        "10.00",
                        "card",
                        start,
                        at,
                        4,
                        _version(i),
                    )
                )
                timeline.write_row((oid, f"order:{oid}", 1, "order.Placed", start, "placed"))
                timeline.write_row(
                    (oid, f"product:{product}", i + 1, "ledger.Reserved", start, "reserved 1")
                )
                timeline.write_row(
                    (oid, f"payment:{oid}", 1, "payment.Authorized", start, "authorized")
                )
                if status == "CANCELLED" or (status == "REJECTED" and i % 2):
                    timeline.write_row(
                        (oid, f"product:{product}", i + 2, "ledger.Released", at, "released 1")
                    )
                timeline.write_row((oid, f"order:{oid}", 2, "order.StatusChanged", at, status))
        took["orders"] = time.perf_counter() - started
        started = time.perf_counter()
        with (
            cur.copy(
                "COPY enrollments (enrollment_id, student_id, course_id, status, "
                "waitlist_position, reason, created_at, updated_at, last_sequence, version) "
                "FROM STDIN"
            ) as enrollments_copy,
            cur2.copy(
                "COPY saga_timeline (saga_id, entity_key, sequence, event_type, occurred_at, "
                "summary) FROM STDIN"
            ) as timeline,
        ):
            for i in range(sagas - orders):
                eid = f"e-{i:07d}"
                status = enrollment_status()
                at = NOW - SPAN * rng.random()
                start = at - timedelta(milliseconds=rng.randint(50, 1500))
                course = f"k-{rng.randrange(COURSES):04d}"
                student = f"s-{rng.randrange(STUDENTS):06d}"
                enrollments_copy.write_row(
                    (
                        eid,
                        student,
                        course,
                        status,
                        1 if status == "WAITLISTED" else None,
                        "course full" if status == "REJECTED" else None,
                        start,
                        at,
                        3,
                        _version(i),
                    )
                )
                timeline.write_row(
                    (eid, f"enrollment:{eid}", 1, "enrollment.Requested", start, "asked")
                )
                timeline.write_row(
                    (eid, f"course:{course}", i + 1, "course.SeatHeld", start, "seat held")
                )
                timeline.write_row(
                    (eid, f"student:{student}", i + 1, "student.CreditsHeld", start, "held")
                )
                timeline.write_row(
                    (eid, f"enrollment:{eid}", 2, "enrollment.StatusChanged", at, status)
                )
        took["enrollments"] = time.perf_counter() - started
        conn.commit()
        conn2.commit()
    started = time.perf_counter()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    took["vacuum analyze"] = time.perf_counter() - started
    return took


async def measure(
    url: str, requests: int, tmp: Path, no_broker: str
) -> list[tuple[str, list[float], int]]:
    keys = tmp / "api-keys"
    settings = Settings(
        api_keys_file=keys,
        console_sessions_dir=tmp / "sessions",
        database_url=url,
        kafka_bootstrap=no_broker,
    )
    app = create_api(settings, bus=object())  # type: ignore[arg-type]
    engine = create_read_engine(url)
    app.state.engine = engine
    app.state.end_offsets = NoEnds()
    app.state.watch = object()  # no consistency token is sent
    # What the lifespan (not run by the ASGI transport) sets: the in-flight cache, no broker.
    app.state.in_flight = in_flight_of(settings, app.state.prometheus)
    key, _ = add_key(keys, ("read",), "bench")
    rng = random.Random(7)
    day_ago = (NOW - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    week_ago = (NOW - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    results: list[tuple[str, list[float], int]] = []
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://console.test") as console,
        httpx.AsyncClient(
            transport=transport,
            base_url="http://api",
            headers={"Authorization": f"Bearer {key}"},
        ) as api,
    ):
        login = await console.post("/console/login", data={"api_key": key})
        assert login.status_code == 303, login.text
        deep = await _cursor_after(api, pages=20)

        def customer() -> str:
            return f"c-{rng.randrange(CUSTOMERS):06d}"

        def product() -> str:
            return f"p-{rng.randrange(PRODUCTS):04d}"

        started = time.perf_counter()
        first = await console.get("/console")
        print(
            f"overview, first request (starts the in-flight reading, no broker): "
            f"{(time.perf_counter() - started) * 1000:.1f} ms, {first.status_code}; reading "
            f"failed: {app.state.in_flight.reading.failed}"
        )
        # One dry run (recorded, never executed) for its page: one product's orders in flight
        # on version 1 (the worker's definitions here are version 1's: a version-2 saga would
        # be refused, as it must be, since no definition of version 2 runs).
        small = {"saga_type": "order", "product": "p-0007", "outcome": "in_flight", "version": "1"}
        started = time.perf_counter()
        with engine.connect() as conn:
            action = ops.dry_run(
                conn, definitions(settings), "compensate", small, "bench", "bench", NOW,
                settings.step_timeout_s,
            )  # fmt: skip
        print(
            f"dry run over {small}: {action.planned} sagas planned in "
            f"{(time.perf_counter() - started) * 1000:.1f} ms (untimed set-up)"
        )
        kinds = list(definitions(settings))
        print(f"saga types with a definition page: {', '.join(kinds)}")

        cases: list[tuple[str, httpx.AsyncClient, Callable[[], str]]] = [
            ("console: overview", console, lambda: "/console"),
            ("console: every saga (first page)", console, lambda: "/console/sagas"),
            ("console: stuck sagas", console, lambda: "/console/sagas?outcome=stuck"),
            (
                "console: orders at AUTHORIZING",
                console,
                lambda: "/console/sagas?saga_type=order&status=AUTHORIZING",
            ),
            (
                "console: compensated, last day",
                console,
                lambda: f"/console/sagas?outcome=compensated&since={day_ago}",
            ),
            (
                "console: a window a week ago",
                console,
                lambda: f"/console/sagas?since={week_ago}&until={day_ago}&outcome=finished",
            ),
            (
                "console: a customer's sagas",
                console,
                lambda: f"/console/sagas?customer={customer()}",
            ),
            ("console: a product's sagas", console, lambda: f"/console/sagas?product={product()}"),
            (
                "console: a course's in-flight",
                console,
                lambda: f"/console/sagas?course=k-{rng.randrange(COURSES):04d}&outcome=in_flight",
            ),
            ("console: the 21st page", console, lambda: f"/console/sagas?after={deep}"),
            (
                "console: a saga's page",
                console,
                lambda: f"/console/sagas/o-{rng.randrange(600_000):07d}",
            ),
            (
                "console: orders on version 2, in flight",
                console,
                lambda: "/console/sagas?saga_type=order&version=2&outcome=in_flight",
            ),
            ("console: failed sagas", console, lambda: "/console/failures"),
            ("console: search a customer", console, lambda: f"/console/search?q={customer()}"),
            ("console: definitions (every type)", console, lambda: "/console/definitions"),
            *[
                (
                    f"console: definition of {kind}",
                    console,
                    lambda k=kind: f"/console/definitions/{k}",
                )
                for kind in kinds
            ],
            (
                "console: compensation form (a product's in flight)",
                console,
                lambda: (
                    f"/console/actions/new?saga_type=order&product={product()}&outcome=in_flight"
                ),
            ),
            (
                f"console: a dry run's page ({action.planned} sagas)",
                console,
                lambda: f"/console/actions/{action.action_id}",
            ),
            ("API: GET /sagas", api, lambda: "/sagas"),
            ("API: GET /sagas?outcome=stuck", api, lambda: "/sagas?outcome=stuck"),
            ("API: GET /sagas?product=", api, lambda: f"/sagas?product={product()}"),
            ("API: GET /sagas?customer=", api, lambda: f"/sagas?customer={customer()}"),
            ("API: GET /sagas?after= (21st page)", api, lambda: f"/sagas?after={deep}"),
            ("API: GET /sagas?limit=500", api, lambda: "/sagas?limit=500"),
            ("API: GET /sagas?version=2", api, lambda: "/sagas?version=2"),
            ("API: GET /overview/sagas", api, lambda: "/overview/sagas"),
        ]
        for name, client, path in cases:
            for _ in range(3):  # warm: the first request of a kind compiles its templates
                await client.get(path())
            times: list[float] = []
            status = 200
            for _ in range(requests):
                started = time.perf_counter()
                response = await client.get(path())
                times.append(time.perf_counter() - started)
                if response.status_code not in (200, 303):
                    status = response.status_code
            results.append((name, times, status))
    engine.dispose()
    return results


async def _cursor_after(api: httpx.AsyncClient, pages: int) -> str:
    params: dict[str, str] = {}
    for _ in range(pages):
        body = (await api.get("/sagas", params=params)).json()
        params = {"after": body["next"]}
    return params["after"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sagas", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--keep", action="store_true", help="Keep the database afterwards")
    parser.add_argument(
        "--no-broker",
        default="127.0.0.1:9",
        help="Kafka bootstrap of the in-flight cache: a port nothing listens on",
    )
    args = parser.parse_args()
    print(machine())
    print(f"commit {git_rev()}; {args.sagas:,} sagas; {args.requests} requests per row")
    admin = create_engine(local_pg_url(), isolation_level="AUTOCOMMIT")
    name = f"bench_console_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(local_pg_url()).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        took = fill(url, args.sagas)
        print("fill: " + ", ".join(f"{k} {v:.1f} s" for k, v in took.items()))
        with create_engine(url).connect() as conn:
            rows = conn.execute(text("SELECT count(*) FROM saga_timeline")).scalar_one()
            size = conn.execute(
                text("SELECT pg_size_pretty(pg_database_size(current_database()))")
            ).scalar_one()
        print(f"timeline rows {rows:,}; database {size}")
        with tempfile.TemporaryDirectory() as tmp:
            results = asyncio.run(measure(url, args.requests, Path(tmp), args.no_broker))
        print()
        print("| page or call | p50 | p95 | max | status |")
        print("|---|---|---|---|---|")
        worst = 0.0
        for label, times, status in results:
            ms = [t * 1000 for t in times]
            p95 = percentile(ms, 95)
            worst = max(worst, p95)
            print(
                f"| {label} | {percentile(ms, 50):.1f} ms | {p95:.1f} ms | {max(ms):.1f} ms "
                f"| {status} |"
            )
        print()
        print(f"worst p95: {worst:.1f} ms ({'under' if worst < 300 else 'OVER'} 300 ms)")
    finally:
        if args.keep:
            print(f"kept database {name}")
        else:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
