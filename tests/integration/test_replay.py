"""`sagaline replay` on a history a real worker recorded on the real broker: the unchanged
code decides it again identically; a lower payment limit diverges on exactly the payments
between the two limits; a shorter step timeout on exactly the sagas whose step waited
longer, at their timeout; a shorter reservation TTL only on the holds the sagas ask for (the
ledgers are replayed with the recorded commands: README, "Changing a saga"); a skipped
compensation on exactly the orders that compensated; the command exits 1 on a divergence
and 0 without."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import pytest_asyncio

from benchmarks.common import delete_run_topics
from runtime.settings import Settings
from runtime.topics import create_topics
from sagaline.wiring import build_processes
from sagas.catalog import INVENTORY, PROCESS_CHANNELS, saga_type_of
from sagas.contracts import enrollment as en
from sagas.contracts import ledger as lc
from sagas.contracts import payment as pc
from sagas.machinery.replay import Replay, replay_all
from sagas.machinery.step import EVENTS_CHANNEL
from services.bus import CommandBus
from services.event_tail import EventTail
from services.replay.candidates import choose
from services.replay.history import RecordedHistory, read_history
from services.replay.report import render, summarize
from tests.integration.harness import Worker, isolated_settings, settings_env
from tests.integration.replay_load import SILENT, Load, drive
from tests.integration.replay_waits import SAGAS, holds, saga_waits

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


def outlasted(longest: list[timedelta], by: int) -> timedelta:
    """A timeout of whole milliseconds that at least ``by`` of ``longest`` outlast, midway
    in a gap of over 4 ms between two of them (the decisions of one batch share a time, so
    many waits are equal)."""
    ordered = sorted(longest, reverse=True)
    for longer, shorter in itertools.pairwise(ordered[by - 1 :]):
        if longer - shorter > timedelta(milliseconds=4):
            return unambiguous(longest, (longer + shorter) / 2)
    raise AssertionError(f"fewer than {by} waits, or no gap of 4 ms below them: {ordered}")


def unambiguous(waited: list[timedelta], start: timedelta) -> timedelta:
    """A timeout of whole milliseconds from ``start`` up that no recorded wait is within a
    millisecond of (a wait as long as the timeout is decided by the clock's last digits)."""
    timeout = timedelta(milliseconds=-(-start // timedelta(milliseconds=1)))
    while any(abs(w - timeout) <= timedelta(milliseconds=1) for w in waited):
        timeout += timedelta(milliseconds=1)
    return timeout


def ended_lines(text: str) -> list[str]:
    """The report's "would have ended differently" block, its heading first."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("would have ended"))
    block = [lines[at]]
    for line in lines[at + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


async def test_a_shorter_step_timeout_diverges_on_exactly_the_sagas_whose_step_waited_longer(
    recorded: tuple[Settings, Load, RecordedHistory],
) -> None:
    settings, _, history = recorded
    sagas = saga_waits(history)
    # a timeout that at least three sagas that succeeded waited longer than (the silent
    # payments waited the recorded 3 s, and failed)
    done = {f.done for saga in SAGAS.values() for f in saga.FLOWS.values()}
    timeout = outlasted([max(w.took for w in s.waits) for s in sagas if s.final in done], by=3)
    timeout = unambiguous([w.took for s in sagas for w in s.waits], timeout)
    assert timeout < timedelta(seconds=settings.step_timeout_s)
    longer = {(s.channel, s.key): s for s in sagas if s.first_longer_than(timeout)}
    assert 5 <= len(longer) < len(sagas), (timeout, len(longer), len(sagas))

    replay = run(settings, history, step_timeout_s=f"{timeout.total_seconds():.3f}")
    firsts = {(k.channel, k.key): k.first for k in replay.keys if k.first is not None}
    assert set(firsts) == set(longer)
    for (channel, key), first in firsts.items():
        wait = longer[(channel, key)].first_longer_than(timeout)
        assert wait is not None and first is not None
        # the first divergent decision is the timeout, at the new timeout after the step
        # began: a deadline decision the recorded run never made
        assert (first.what, first.at, first.recorded) == ("deadline", wait.began + timeout, ())
        if not wait.forward:  # past the pivot a timeout asks again: no status changes
            said = [s.envelope.payload for s in first.replayed if s.channel == EVENTS_CHANNEL]
            assert [p["reason"] for p in said if "status" in p] == ["timeout"], (key, said)

    summary = summarize(replay, compared_with_baseline=True)
    expected = Counter(
        f"{s.channel}: {s.final} -> {s.after_timeout(timeout)}"
        for s in longer.values()
        if s.final != s.after_timeout(timeout)
    )
    assert expected  # the sagas that succeeded after a longer wait would have failed
    assert summary.ended == dict(expected)
    assert ended_lines(render(summary)) == [
        f"would have ended differently: {sum(expected.values())}",
        *(f"  {change}: {n}" for change, n in sorted(expected.items())),
    ]
    # every saga that waited on a step set its deadline otherwise: counted, no divergence
    waited = {(s.channel, s.key) for s in sagas if s.waits}
    assert {(k.channel, k.key) for k in replay.keys if k.deadlines_otherwise} == waited


async def test_a_shorter_reservation_ttl_shows_on_the_holds_asked_not_on_the_ledgers(
    recorded: tuple[Settings, Load, RecordedHistory],
) -> None:
    """The TTL travels in the hold command (its ``ttl_seconds``): the sagas ask for the
    shorter one, but each ledger key is replayed with the commands it recorded, so the
    holds that would have expired under it do not show (README, "Changing a saga")."""
    settings, _, history = recorded
    ttl = timedelta(seconds=1)
    ledger = next(p for p in build_processes(settings) if p.name == INVENTORY)
    held = holds(history, ledger.entity_type)
    outlived = {key for key, took in held.values() if took > ttl}
    assert len(outlived) >= 3  # the silent payments' orders held their stock for 3 s
    asked = {(h.channel, h.key): h.inputs[0].type for h in history.histories if h.channel in SAGAS}

    replay = run(settings, history, reservation_ttl_s=str(ttl.total_seconds()))
    kinds = {
        "order-saga": f"{lc.Reserve.TYPE} differs (payload.ttl_seconds)",
        "enrollment-saga": f"{en.ReserveSeat.TYPE} differs (payload.ttl_seconds)",
    }
    firsts = {(k.channel, k.key): k.first for k in replay.keys if k.first is not None}
    assert {k: (f.what, f.kind) for k, f in firsts.items() if f is not None} == {
        (channel, key): (what, kinds[channel]) for (channel, key), what in asked.items()
    }
    assert not any(k.deadlines_otherwise for k in replay.keys)
    summary = summarize(replay, compared_with_baseline=True)
    assert summary.ended == {}
    assert ended_lines(render(summary)) == ["would have ended differently: 0"]
    groups = {(g.channel, g.status, g.kind): len(g.keys) for g in summary.groups}
    assert groups == {
        ("order-saga", "-", kinds["order-saga"]): sum(1 for c, _ in asked if c == "order-saga"),
        ("enrollment-saga", "-", kinds["enrollment-saga"]): sum(
            1 for c, _ in asked if c == "enrollment-saga"
        ),
    }


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
