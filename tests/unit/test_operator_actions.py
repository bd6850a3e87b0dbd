"""An operator's bulk action over a migrated SQLite read side (services/operator/actions.py):
the dry run lists exactly the sagas the filter matches whose cancel changes them, with the
commands their definition would send, and is recorded; the execution sends one cancel per
listed saga with an id derived from both ids, records its progress per batch, and resumes
after a crash without sending a saga's cancel under two ids."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from readside import schema, store
from readside.engine import create_read_engine
from readside.migrate import upgrade
from runtime.settings import Settings
from sagas.contracts import orders as oc
from sagas.definitions.order_saga import OrderSaga
from sagas.messages import Envelope
from sagas.projections.enrollments import ENROLLMENTS
from sagas.projections.orders import ORDERS
from services.operator import actions
from services.operator.definitions import definitions, kit_sagas

from . import versions_example
from .test_console_sagas import enrollment, order
from .versions_example import OrderSagaV2

pytestmark = pytest.mark.unit
SAGAS = definitions(Settings())
NOW = datetime.now(UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = f"sqlite:///{tmp_path / 'read.db'}"
    upgrade(url)
    engine = create_read_engine(url)
    with engine.begin() as conn:
        flying = [order(f"o-{i:02d}", "AUTHORIZING", NOW - timedelta(seconds=i)) for i in range(7)]
        others = [order("o-done", "CONFIRMED", NOW), order("o-pending", "PENDING", NOW)]
        store.save_rows(conn, ORDERS, [*flying, *others])
        store.save_rows(conn, ENROLLMENTS, [enrollment("e-1", "PENDING", NOW)])
    yield engine
    engine.dispose()


def plan(
    engine: Engine, kind: str, given: dict[str, str], sagas: Mapping[str, Any] = SAGAS
) -> actions.Action:
    with engine.connect() as conn:
        return actions.dry_run(conn, sagas, kind, given, "ops: bad batch", "key-1", NOW, 30)


class Kafka:
    """Records what is sent; ``fail_after`` sends, it crashes (as a killed process would)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.sent: list[tuple[str, Envelope]] = []
        self.fail_after = fail_after

    async def send(self, channel: str, envelope: Envelope) -> Any:
        if self.fail_after is not None and len(self.sent) >= self.fail_after:
            raise ConnectionError("killed")
        self.sent.append((channel, envelope))


def test_the_dry_run_lists_exactly_the_filtered_sagas_and_their_compensations(
    engine: Engine,
) -> None:
    action = plan(engine, "compensate", {"saga_type": "order", "status": "AUTHORIZING"})
    assert [t.saga_id for t in action.sagas] == [f"o-{i:02d}" for i in range(7)]
    assert (action.state, action.planned, action.sent, action.requested_by) == (
        "planned", 7, 0, "key-1",
    )  # fmt: skip
    assert action.filter == {"saga_type": "order", "status": "AUTHORIZING"}
    lines = action.sagas[0].plan["commands"]
    assert [(c["channel"], c["type"]) for c in lines] == [
        ("inventory", "ledger.Cancel"),
        ("payment", "payment.Void"),
    ]
    assert action.sagas[0].plan["settles_in"] == "CANCELLED"


def test_a_final_saga_is_never_listed_and_a_wrong_filter_is_a_sentence(engine: Engine) -> None:
    action = plan(engine, "compensate", {"saga_type": "order"})
    assert "o-done" not in {t.saga_id for t in action.sagas} and action.planned == 8
    with pytest.raises(actions.ActionError, match="no saga type"):
        plan(engine, "compensate", {"saga_type": "nope"})
    with pytest.raises(actions.ActionError, match="one saga"):
        plan(engine, "cancel", {"saga_type": "order"})


async def test_the_execution_sends_each_cancel_once_and_resumes_after_a_crash(
    engine: Engine,
) -> None:
    action = plan(engine, "compensate", {"saga_type": "order", "status": "AUTHORIZING"})
    crashing = Kafka(fail_after=4)
    with pytest.raises(ConnectionError):
        await actions.execute(engine, crashing, SAGAS, action.action_id, "key-2", batch=3)
    with engine.connect() as conn:
        halfway = actions.load(conn, action.action_id)
    assert halfway is not None and (halfway.state, halfway.sent) == ("running", 3)
    assert halfway.confirmed_by == "key-2"

    kafka = Kafka()
    done = await actions.execute(engine, kafka, SAGAS, action.action_id, "key-3", batch=3)
    assert (done.state, done.sent, done.confirmed_by) == ("done", 7, "key-2")
    every = [*crashing.sent, *kafka.sent]
    ids = {e.key: e.message_id for _c, e in every}
    assert sorted(ids) == [f"o-{i:02d}" for i in range(7)]
    # A saga sent to twice (its batch crashed half sent) got one id both times.
    assert all(e.message_id == ids[e.key] for _c, e in every)
    assert {(c, e.type, e.payload["reason"]) for c, e in every} == {
        ("order-saga", oc.CancelOrder.TYPE, "ops: bad batch")
    }
    again = await actions.execute(engine, Kafka(), SAGAS, action.action_id, "key-3")
    assert again.sent == 7  # a finished action sends nothing more


async def test_a_saga_final_by_its_turn_is_skipped_and_every_action_shows_on_its_saga(
    engine: Engine,
) -> None:
    action = plan(engine, "cancel", {"saga_id": "o-00"})
    with engine.begin() as conn:
        store.save_rows(conn, ORDERS, [order("o-00", "CONFIRMED", NOW)])
    kafka = Kafka()
    done = await actions.execute(engine, kafka, SAGAS, action.action_id, "key-1")
    assert kafka.sent == [] and done.sagas[0].outcome == "not sent (again): already CONFIRMED"
    with engine.connect() as conn:
        shown = actions.of_saga(conn, "o-00")
    assert [(a.action_id, a.kind, a.requested_by) for a, _t in shown] == [
        (action.action_id, "cancel", "key-1")
    ]


# --- over REST (scope admin) ---------------------------------------------------------------


async def test_the_rest_api_plans_then_executes_and_needs_the_admin_scope(tmp_path: Path) -> None:
    import httpx

    from tests.unit.test_console import Console

    console = Console(tmp_path)
    kafka = Kafka()
    console.app.state.bus = kafka
    with console.engine.begin() as conn:
        store.save_rows(conn, ORDERS, [order(f"o-{i}", "PENDING", NOW) for i in range(3)])
    admin, reader = console.key("admin"), console.key("read", "commands")
    body = {"filter": {"saga_type": "order", "status": "PENDING"}, "reason": "ops"}
    transport = httpx.ASGITransport(app=console.app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://a") as http:
            refused = await http.post(
                "/compensations", json=body, headers={"Authorization": f"Bearer {reader}"}
            )
            assert refused.status_code == 403
            auth = {"Authorization": f"Bearer {admin}"}
            planned = await http.post("/compensations", json=body, headers=auth)
            assert planned.status_code == 201, planned.text
            action = planned.json()
            assert planned.headers["location"] == f"/actions/{action['action_id']}"
            assert [s["saga_id"] for s in action["sagas"]] == ["o-0", "o-1", "o-2"]
            assert action["state"] == "planned" and kafka.sent == []
            assert action["requested_by"] == admin.split("_")[1]
            url = f"/actions/{action['action_id']}/execute"
            done = (await http.post(url, headers=auth)).json()
            assert (done["state"], done["sent"]) == ("done", 3)
            assert sorted(e.key for _c, e in kafka.sent) == ["o-0", "o-1", "o-2"]
            wrong = await http.post(
                "/compensations", json={**body, "filter": {"colour": "red"}}, headers=auth
            )
            assert wrong.status_code == 422 and "filter.colour" in wrong.json()["message"]
    finally:
        console.engine.dispose()


def test_a_filter_by_version_plans_only_the_sagas_on_that_version_each_by_its_rules(
    engine: Engine,
) -> None:
    orders = schema.table_of(ORDERS)
    with engine.begin() as conn:
        later = orders.c.order_id.in_(["o-01", "o-03", "o-pending"])
        conn.execute(orders.update().where(later).values(version=2))
    # the worker runs version 2 of the order saga beside version 1 (version 2 refuses the
    # cancel of an order past PENDING: its AUTHORIZING orders are not touched)
    both = {**SAGAS, **kit_sagas(versions_example.domain(OrderSagaV2, OrderSaga).build(Settings()))}
    action = plan(engine, "compensate", {"saga_type": "order", "version": "2"}, both)
    assert [t.saga_id for t in action.sagas] == ["o-pending"]
    assert action.filter == {"saga_type": "order", "version": "2"}
    first = plan(engine, "compensate", {"status": "AUTHORIZING", "version": "1"}, both)
    assert [t.saga_id for t in first.sagas] == ["o-00", "o-02", "o-04", "o-05", "o-06"]
    with pytest.raises(actions.ActionError, match="a whole number from 1"):
        plan(engine, "compensate", {"version": "latest"}, both)
    # definitions of version 1 alone cannot plan a version-2 saga: refused, never guessed
    with pytest.raises(actions.ActionError, match="No saga definition runs version 2 of the"):
        plan(engine, "compensate", {"saga_type": "order", "version": "2"})


def test_the_rest_filter_takes_a_version_as_the_list_does() -> None:
    from services.api.actions import SagaFilterBody

    assert SagaFilterBody.model_validate({"version": 3}).given() == {"version": "3"}
    for wrong in (0, -1, 2**31, "two"):
        with pytest.raises(ValueError, match="version"):
            SagaFilterBody.model_validate({"version": wrong})


def test_the_rest_filter_has_exactly_the_saga_lists_filters() -> None:
    from services.api.actions import SagaFilterBody
    from services.api.saga_list import PARAMETERS

    assert set(SagaFilterBody.model_fields) == set(PARAMETERS) - {"after", "limit"}
    since = SagaFilterBody.model_validate({"since": "2026-11-25T14:00:00Z", "saga_type": "order"})
    assert since.given() == {"saga_type": "order", "since": "2026-11-25T14:00:00+00:00"}
    for wrong in (0, "2026-11-25", "2026-11-25T14:00:00", "1764079200"):
        with pytest.raises(ValueError, match="date and time with its offset"):
            SagaFilterBody.model_validate({"since": wrong})


# --- the command line ------------------------------------------------------------------------


def test_the_cli_prints_the_dry_run_then_runs_it_by_its_action_id(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from sagaline import cli, operator_cli

    kafka = Kafka()

    class Bus(Kafka):
        async def start(self) -> None: ...
        async def stop(self) -> None: ...

    bus = Bus()
    bus.sent = kafka.sent
    monkeypatch.setattr(cli, "_read_engine", lambda: engine)
    monkeypatch.setattr(engine, "dispose", lambda: None)
    monkeypatch.setattr(operator_cli, "_bus", lambda: bus)
    run = CliRunner(mix_stderr=False).invoke
    command = ["sagas", "compensate", "--saga-type", "order", "--status", "AUTHORIZING"]
    dry = run(cli.main, [*command, "--reason", "ops", "--dry-run"])
    assert dry.exit_code == 0, dry.output + dry.stderr
    assert dry.output.count("ledger.Cancel to inventory") == 7 and kafka.sent == []
    action_id = dry.output.split("--action ")[1].split()[0]
    done = run(cli.main, ["sagas", "compensate", "--action", action_id])
    assert done.exit_code == 0, done.output + done.stderr
    assert "done, 7/7 done" in done.output and len(kafka.sent) == 7
    one = run(cli.main, ["sagas", "cancel", "o-pending", "--reason", "fraud", "--yes"])
    assert one.exit_code == 0 and "o-pending" in one.output and len(kafka.sent) == 8


# --- the console ---------------------------------------------------------------------------


async def test_the_console_dry_runs_a_filter_then_sends_on_confirmation(tmp_path: Path) -> None:
    from tests.unit.test_console import Console, form_token

    console = Console(tmp_path)
    kafka = Kafka()
    console.app.state.bus = kafka
    with console.engine.begin() as conn:
        rows = [order(f"o-{i}", "AUTHORIZING", NOW) for i in range(2)]
        store.save_rows(conn, ORDERS, [*rows, order("o-x", "PENDING", NOW)])
    try:
        async with console.logged_in("read") as reader:
            token = await form_token(reader)
            form = {"form_token": token, "kind": "cancel", "saga_id": "o-x", "reason": "r"}
            refused = await reader.post("/console/actions", data=form)
            assert refused.status_code == 403 and "admin" in refused.text
        async with console.logged_in("read", "admin") as admin:
            listed = (await admin.get("/console/sagas?saga_type=order&status=AUTHORIZING")).text
            assert "/console/actions/new?saga_type=order&amp;status=AUTHORIZING" in listed
            new = await admin.get("/console/actions/new?saga_type=order&status=AUTHORIZING")
            assert 'name="filter" value="saga_type=order&amp;status=AUTHORIZING"' in new.text
            token = await form_token(admin)
            form = {"form_token": token, "kind": "compensate", "reason": "outage",
                    "filter": "saga_type=order&status=AUTHORIZING"}  # fmt: skip
            planned = await admin.post("/console/actions", data=form)
            assert planned.status_code == 303
            url = planned.headers["location"]
            page = (await admin.get(url)).text
            assert "o-0" in page and "o-1" in page and "o-x" not in page
            assert page.count("payment.Void to payment") == 2 and 'id="confirm-action"' in page
            assert kafka.sent == []
            done = await admin.post(f"{url}/execute", data={"form_token": token})
            assert done.status_code == 303 and len(kafka.sent) == 2
            page = (await admin.get(url)).text
            assert '<span id="action-state">done</span>' in page and "2 of 2" in page
            saga = (await admin.get("/console/sagas/o-0")).text
            assert url in saga and "outage" in saga
    finally:
        console.engine.dispose()
