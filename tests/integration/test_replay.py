"""`sagaline replay` on a history a real worker recorded on the real broker: the unchanged
code decides it again identically; a lower payment limit diverges on exactly the payments
between the two limits; a skipped compensation on exactly the orders that compensated; the
command exits 1 on a divergence and 0 without."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest
import pytest_asyncio

from benchmarks.common import delete_run_topics
from runtime.settings import Settings
from runtime.topics import create_topics
from sagaline.wiring import build_processes
from sagas.catalog import PROCESS_CHANNELS, saga_type_of
from sagas.contracts import ledger as lc
from sagas.contracts import payment as pc
from sagas.machinery.replay import Replay, replay_all
from services.bus import CommandBus
from services.event_tail import EventTail
from services.replay.candidates import choose
from services.replay.history import RecordedHistory, read_history
from tests.integration.harness import Worker, isolated_settings, settings_env
from tests.integration.replay_load import SILENT, Load, drive

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

LOWER = Decimal("100")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def recorded(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[Settings, Load, RecordedHistory]]:
    tmp = tmp_path_factory.mktemp("replay")
    settings = isolated_settings(tmp, step_timeout_s=3.0, payment_silent_methods=SILENT)
    await create_topics(settings)
    worker = Worker(settings, tmp)
    bus, tail = CommandBus(settings), EventTail(settings, from_beginning=True)
    try:
        await asyncio.to_thread(worker.start)
        await bus.start()
        await tail.start()
        load = await drive(bus, tail, orders=160, enrollments=90)
        history = await read_history(settings, PROCESS_CHANNELS)
        yield settings, load, history
    finally:
        await tail.stop()
        await bus.stop()
        worker.stop()
        await delete_run_topics(settings)


def run(
    settings: Settings,
    history: RecordedHistory,
    definitions: str | None = None,
    **overrides: str,
) -> Replay:
    chosen = choose(settings, build_processes, definitions, overrides)
    return replay_all(
        history.histories, chosen.candidates, history.recording, chosen.baselines, history.until
    )


def diverging(replay: Replay) -> dict[tuple[str, str], str]:
    return {(k.channel, k.key): k.first.kind for k in replay.keys if k.first is not None}


def inputs_of(history: RecordedHistory, channel: str, type_: str) -> list[dict[str, object]]:
    return [
        {"key": e.key, "saga_id": e.saga_id, **e.payload}
        for h in history.histories
        if h.channel == channel
        for e in h.inputs
        if e.type == type_
    ]


async def test_the_unchanged_code_decides_the_recorded_history_again_identically(
    recorded: tuple[Settings, Load, RecordedHistory],
) -> None:
    settings, load, history = recorded
    replay = run(settings, history)
    assert diverging(replay) == {}
    assert [(k.channel, k.key, k.not_replayable) for k in replay.keys if k.not_replayable] == []
    saga_channels = {p.name for p in build_processes(settings) if saga_type_of(p.entity_type)}
    sagas = {k.key for k in replay.keys if k.channel in saga_channels}
    assert sagas == set(load.orders) | set(load.enrollments)  # every saga replayed, the load's
    assert replay.unattributed == 0
    # the load had every outcome it is meant to have
    finals = {k.status_after for k in replay.keys if k.channel == "order-saga"}
    assert finals >= {"CONFIRMED", "CANCELLED", "REJECTED"}
    enrollments = {k.status_after for k in replay.keys if k.channel == "enrollment-saga"}
    assert enrollments >= {"ENROLLED", "WAITLISTED", "DROPPED"}


async def test_a_lower_payment_limit_diverges_on_exactly_the_payments_between_the_limits(
    recorded: tuple[Settings, Load, RecordedHistory],
) -> None:
    settings, _, history = recorded
    old = settings.payment_max_amount
    authorized = inputs_of(history, "payment", pc.Authorize.TYPE)
    between = {
        str(a["key"])
        for a in authorized
        if a["method"] == "card" and LOWER < Decimal(str(a["amount"])) <= old
    }
    assert len(between) >= 10
    replay = run(settings, history, payment_max_amount=str(LOWER))
    assert diverging(replay) == {
        ("payment", k): "payment.Authorized -> payment.Declined" for k in between
    }
    ended = {k.key: (k.status_before, k.status_after) for k in replay.keys if k.first}
    assert set(ended.values()) <= {("CAPTURED", "DECLINED"), ("VOIDED", "DECLINED")}


async def test_a_skipped_compensation_diverges_on_exactly_the_orders_that_compensated(
    recorded: tuple[Settings, Load, RecordedHistory],
) -> None:
    settings, _, history = recorded
    released = [
        *inputs_of(history, "inventory", lc.Cancel.TYPE),
        *inputs_of(history, "payment", pc.Void.TYPE),
    ]
    compensated = {str(r["saga_id"]) for r in released}
    assert len(compensated) >= 10
    replay = run(settings, history, "tests.unit.replay_bug")
    found = diverging(replay)
    assert set(found) == {("order-saga", k) for k in compensated}
    assert all(kind.startswith("missing ") for kind in found.values())


async def test_the_command_exits_1_on_a_divergence_and_0_without(
    recorded: tuple[Settings, Load, RecordedHistory],
) -> None:
    settings, load, _ = recorded

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sagaline.cli", "replay", "--json", *args],
            env=settings_env(settings),
            capture_output=True,
            text=True,
            cwd=Path(__file__).parents[2],
            timeout=300,
        )

    same = await asyncio.to_thread(command)
    assert same.returncode == 0, same.stderr
    report = json.loads(same.stdout)
    assert (report["diverging"], report["not_replayable"]) == (0, {})
    assert report["identical"] == report["replayed"] >= load.sagas
    lower = await asyncio.to_thread(command, "--set", f"payment_max_amount={LOWER}")
    assert lower.returncode == 1, lower.stderr
    (group,) = json.loads(lower.stdout)["groups"]
    assert (group["channel"], group["status"], group["kind"]) == (
        "payment", "NEW", "payment.Authorized -> payment.Declined",
    )  # fmt: skip
    assert group["example"]["recorded"][0]["type"] == pc.Authorized.TYPE
    assert group["example"]["replayed"][0]["type"] == pc.Declined.TYPE
