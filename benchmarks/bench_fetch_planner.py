"""The worker's fetch planner beside aiokafka's own (issue 27, services/worker/fetch_planner.py).

    python -m benchmarks.bench_fetch_planner [--plans 5000] [--rounds 7]

Plans the fetches of a worker's assignment with the default settings: 8 process topics and
8 tables' changelogs of 8 partitions each, the changelogs paused in aiokafka's subscription,
every position valid, nothing in flight, no records waiting; one broker. (In the worker
Faust pauses them in its own set only, so aiokafka plans them as fetchable or holding
records: a model of the planner's cost, whose branches are each about as dear.) Each round runs both
planners ``--plans`` times, in alternating order; the best round of each is reported as
microseconds a plan, with the ratio of the two bests and the median of the rounds' ratios.
Times are this process's CPU time, not the wall clock's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.subscription_state import Assignment
from aiokafka.structs import TopicPartition

from benchmarks.common import git_rev, machine
from services.worker.fetch_planner import AIOKAFKA_PLAN, plan_actions
from tests.unit.test_fetch_planner import fake_fetcher

PARTITIONS = 8
TOPICS = 8


def worker_assignment() -> tuple[Any, Assignment]:
    cluster = ClusterMetadata()
    cluster._brokers = {1: object()}
    names = [f"in{i}" for i in range(TOPICS)] + [f"changelog{i}" for i in range(TOPICS)]
    cluster._partitions = {
        name: {p: SimpleNamespace(leader=1) for p in range(PARTITIONS)} for name in names
    }
    tps = [TopicPartition(name, p) for name in names for p in range(PARTITIONS)]
    assignment = Assignment(tps)
    for tp in tps:
        assignment.state_value(tp).seek(1_000)
        if tp.topic.startswith("changelog"):
            assignment.state_value(tp).pause()
    fetcher = fake_fetcher(cluster)
    return fetcher, assignment


def timed(plan: Callable[[Any, Any], Any], fetcher: Any, assignment: Any, plans: int) -> float:
    started = time.process_time()
    for _ in range(plans):
        plan(fetcher, assignment)
    return (time.process_time() - started) / plans * 1e6


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    print(f"commit: {git_rev()}")
    fetcher, assignment = worker_assignment()
    print(f"assignment: {len(assignment.tps)} partitions, {TOPICS * PARTITIONS} paused")
    theirs: list[float] = []
    ours: list[float] = []
    for i in range(args.rounds):
        order = [(theirs, AIOKAFKA_PLAN), (ours, plan_actions)]
        for into, plan in order if i % 2 == 0 else reversed(order):
            into.append(timed(plan, fetcher, assignment, args.plans))
    ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
    print(f"aiokafka  {min(theirs):.1f} us a plan (best of {args.rounds})")
    print(f"worker's  {min(ours):.1f} us a plan (best of {args.rounds})")
    print(
        f"ratio     {min(ours) / min(theirs):.2f}x by the bests, "
        f"{statistics.median(ratios):.2f}x by the median of the rounds"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    # The planner reads pause futures, which need a running loop.
    asyncio.run(main(parser.parse_args()))
