"""`sagaline replay` on a recorded history of many sagas (BENCHMARKS.md, "Issue 29").

A worker on a topic set of its own runs orders and enrollments (confirmed, declined by
method or amount, out of stock, cancelled, timed out, waitlisted, dropped, transferred:
tests/integration/replay_load.py), SIGKILLed once mid-load and restarted (so the history
holds batches decided twice). Then the replay reads it back and decides it again:

- with the unchanged code: every decision identical, and how long it took;
- with ``payment_max_amount`` lowered: exactly the payments between the two limits diverge;
- with a deliberate bug (tests/unit/replay_bug.py: one compensation skipped): exactly the
  orders that compensated diverge.

    python -m benchmarks.bench_replay --orders 6000 --enrollments 4000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import time
from collections import Counter
from decimal import Decimal
from typing import Any

from benchmarks.common import git_rev, machine, run_settings, worker_bus_tail
from runtime.settings import Settings
from runtime.topics import create_topics
from sagaline.wiring import build_processes
from sagas.catalog import PROCESS_CHANNELS
from sagas.contracts import ledger as lc
from sagas.contracts import payment as pc
from sagas.machinery.replay import Replay, replay_all
from services.replay.candidates import choose
from services.replay.history import RecordedHistory, assemble, read_raw
from services.replay.report import render, summarize
from tests.integration.harness import Worker
from tests.integration.replay_load import SILENT, drive


async def kill_once(worker: Worker, after_s: float) -> None:
    await asyncio.sleep(after_s)
    worker.kill()
    await asyncio.to_thread(worker.start)
    print(f"killed    the worker with SIGKILL {after_s:.0f} s into the load; restarted")


def replayed(
    settings: Settings, history: RecordedHistory, definitions: str | None = None, **overrides: str
) -> tuple[Replay, float]:
    started, cpu = time.perf_counter(), time.process_time()
    chosen = choose(settings, build_processes, definitions, overrides)
    replay = replay_all(
        history.histories, chosen.candidates, history.recording, chosen.baselines, history.until
    )
    took = time.perf_counter() - started
    print(f"          ({took:.1f} s wall clock, {time.process_time() - cpu:.1f} s CPU)")
    return replay, took


def diverging(replay: Replay) -> set[tuple[str, str]]:
    return {(k.channel, k.key) for k in replay.keys if k.first is not None}


def inputs(history: RecordedHistory, channel: str, type_: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (str(e.saga_id), e.payload)
        for h in history.histories
        if h.channel == channel
        for e in h.inputs
        if e.type == type_
    ]


def _why(reason: str | None) -> str:
    """A reason's kind: the load's outcomes, without their ids and amounts."""
    if reason is None:
        return ""
    for kind in (
        "transfer",
        "already",
        "timeout",
        "declined",
        "out of stock",
        "changed mind",
        "expired",
        "seat",
        "credit",
    ):
        if kind in reason:
            return f" ({kind})"
    return f" ({reason[:24]})"


async def record(args: argparse.Namespace) -> tuple[Settings, set[str], Any]:
    """Run the load on a worker of its own; the settings, the sagas' keys and the records
    read back (kept in ``--dump``, if given, to replay again with ``--from-dump``)."""
    data, settings = run_settings(
        "replay",
        step_timeout_s=args.step_timeout,
        payment_silent_methods=SILENT,
        reservation_ttl_s=600.0,
    )
    await create_topics(settings)
    async with worker_bus_tail(settings, data) as (workers, bus, tail):
        started = time.perf_counter()
        killer = asyncio.create_task(kill_once(workers[0], args.kill_after))
        load = await drive(bus, tail, args.orders, args.enrollments, pause_s=args.pause)
        await killer
        print(
            f"recorded  {len(load.orders)} orders and {len(load.enrollments)} enrollments, "
            f"all settled, in {time.perf_counter() - started:.0f} s"
        )
        outcomes = Counter(
            (key.partition(":")[0], o.status, _why(o.reason)) for key, o in tail.statuses.items()
        )
        print(
            "outcomes  "
            + ", ".join(f"{t} {s}{w}: {n}" for (t, s, w), n in sorted(outcomes.items()))
        )
        began = time.perf_counter()
        raw = await read_raw(settings, PROCESS_CHANNELS)
        print(f"read      {len(raw[0]):,} records in {time.perf_counter() - began:.1f} s")
    keys = set(load.orders) | set(load.enrollments)
    if args.dump:
        with open(args.dump, "wb") as f:
            pickle.dump((settings, keys, raw), f)
    return settings, keys, raw


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}\ncommit: {git_rev()}")
    if args.from_dump:
        with open(args.from_dump, "rb") as f:
            settings, keys, raw = pickle.load(f)
    else:
        settings, keys, raw = await record(args)
    began, cpu = time.perf_counter(), time.process_time()
    history = assemble(*raw)
    print(
        f"grouped   {len(raw[0]):,} records into {len(history.histories):,} keys "
        f"(decoded, indexed) in {time.perf_counter() - began:.1f} s "
        f"({time.process_time() - cpu:.1f} s CPU); 1-min load average {os.getloadavg()[0]:.1f}"
    )
    if args.profile:
        import cProfile
        import pstats

        with cProfile.Profile() as profile:
            replayed(settings, history)
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)
    same, same_s = replayed(settings, history)
    summary = summarize(same, compared_with_baseline=False)
    print(f"unchanged replayed in {same_s:.1f} s:")
    print(render(summary))
    sagas = {k.key for k in same.keys if k.channel in ("order-saga", "enrollment-saga")}
    finals = Counter((k.channel, k.status_after) for k in same.keys if k.key in sagas)
    print(f"          final statuses: {sorted(finals.items())}")
    assert sagas == keys
    assert summary.diverging == 0 and not summary.not_replayable

    lower = Decimal(args.lower)
    between = {
        key
        for key, p in inputs(history, "payment", pc.Authorize.TYPE)
        if p["method"] == "card" and lower < Decimal(p["amount"]) <= settings.payment_max_amount
    }
    limit, limit_s = replayed(settings, history, payment_max_amount=str(lower))
    found = diverging(limit)
    print(
        f"limit     payment_max_amount {settings.payment_max_amount} -> {lower}: "
        f"{len(found)} diverging keys, {len(between)} payments between the limits, "
        f"equal: {found == {('payment', k) for k in between}} ({limit_s:.1f} s)"
    )
    print(render(summarize(limit, compared_with_baseline=True)))
    assert found == {("payment", k) for k in between}

    released = inputs(history, "inventory", lc.Cancel.TYPE)
    released += inputs(history, "payment", pc.Void.TYPE)
    compensated = {key for key, _ in released}
    bug, bug_s = replayed(settings, history, definitions="tests.unit.replay_bug")
    found = diverging(bug)
    print(
        f"bug       one compensation skipped: {len(found)} diverging keys, "
        f"{len(compensated)} orders that compensated, "
        f"equal: {found == {('order-saga', k) for k in compensated}} ({bug_s:.1f} s)"
    )
    assert found == {("order-saga", k) for k in compensated}
    if args.spark:
        on_spark(settings, raw, {"unchanged": same, "limit": limit, "bug": bug}, lower)


def on_spark(settings: Settings, raw: Any, local: dict[str, Replay], lower: Decimal) -> None:
    """The same three replays on Spark (local[2]), each compared key by key with the local."""
    from spark_projections.replay import spark_replay
    from spark_projections.session import build_session

    spark = build_session(
        settings.model_copy(
            update={
                "spark_master": "local[2]",
                "spark_driver_memory": "2g",
                "spark_shuffle_partitions": 8,
            }
        ),
        app_name="bench-replay",
    )
    raws, earliest, letters = raw
    frame = spark.createDataFrame(
        [(r.channel, r.partition, r.offset, bytearray(r.value or b"")) for r in raws],
        "topic string, partition int, offset long, value binary",
    )
    channels = {r.channel: r.channel for r in raws}
    runs = {"unchanged": (None, {}), "limit": (None, {"payment_max_amount": str(lower)}),
            "bug": ("tests.unit.replay_bug", {})}  # fmt: skip
    for name, (definitions, overrides) in runs.items():
        chosen = choose(settings, build_processes, definitions, overrides)
        started, cpu = time.perf_counter(), time.process_time()
        distributed = spark_replay(
            frame, channels, chosen.candidates, chosen.baselines, earliest, letters
        )
        took = time.perf_counter() - started
        equal = shape(distributed) == shape(local[name])
        print(
            f"spark     {name}: {len(distributed.keys):,} keys, {len(diverging(distributed))} "
            f"diverging, equal to the local replay key by key: {equal} ({took:.1f} s wall "
            f"clock, driver CPU {time.process_time() - cpu:.1f} s)"
        )
        assert equal
    spark.stop()


def shape(replay: Replay) -> dict[tuple[str, str], tuple[Any, ...]]:
    return {
        (k.channel, k.key): (
            k.decisions,
            tuple(c.differences for c in sorted(k.diverging, key=lambda c: (c.at, c.cause))),
            k.not_replayable,
            k.status_before,
            k.status_after,
        )
        for k in replay.keys
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=6000)
    parser.add_argument("--enrollments", type=int, default=4000)
    parser.add_argument("--lower", default="300", help="the lowered payment limit")
    parser.add_argument("--kill-after", type=float, default=8.0)
    parser.add_argument("--profile", action="store_true", help="profile the unchanged replay")
    parser.add_argument("--step-timeout", type=float, default=300.0)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between 250 sagas")
    parser.add_argument("--dump", help="keep the records read in this file")
    parser.add_argument("--from-dump", help="replay the records kept by --dump, record nothing")
    parser.add_argument("--spark", action="store_true", help="also on Spark, compared key by key")
    asyncio.run(main(parser.parse_args()))
