"""The worker's fetch planner beside aiokafka's own (issue 27, services/worker/fetch_planner.py).

    python -m benchmarks.bench_fetch_planner [--plans 5000] [--rounds 7]

Plans the fetches of a worker's assignment with the default settings: 8 process topics and
8 tables' changelogs of 8 partitions each, the changelogs paused (as after recovery), every
position valid, nothing in flight, no records waiting; one broker. Each round runs both
planners ``--plans`` times, in alternating order; the best round of each is reported as
microseconds a plan, with the ratio of the two bests and the median of the rounds' ratios.
Then, with the worker's planner, one turn of the fetcher's loop: a plan and the wait that
follows it (``asyncio.wait`` for the first of a finished fetch, the consume and unassignment
futures, and the plan's resume futures), the paused partitions' resume futures each
(``plan_actions``, as aiokafka) against one for all (``plan``). Times are this process's CPU time, not the wall clock's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from itertools import chain
from types import SimpleNamespace
from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.subscription_state import Assignment
from aiokafka.structs import TopicPartition

from benchmarks.common import git_rev, machine
from services.worker.fetch_planner import AIOKAFKA_PLAN, plan, plan_actions
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


async def timed_turns(
    plan: Callable[[Any, Any], Any], fetcher: Any, assignment: Any, turns: int
) -> float:
    """A turn of aiokafka's ``Fetcher._fetch_requests_routine``: plan, then wait for the
    first of the futures it waits on (here a fetch that has finished)."""
    loop = asyncio.get_running_loop()
    others = [loop.create_future(), loop.create_future()]  # a consume, the unassignment
    started = time.process_time()
    for _ in range(turns):
        resumes = plan(fetcher, assignment)[4]
        fetched = loop.create_future()
        fetched.set_result(True)
        await asyncio.wait(
            set(chain([fetched], others, resumes)), timeout=1, return_when=asyncio.FIRST_COMPLETED
        )
    return (time.process_time() - started) / turns * 1e6


def compare(
    name: str, theirs: list[float], ours: list[float], rounds: int, labels: tuple[str, str]
) -> None:
    ratios = [o / t for o, t in zip(ours, theirs, strict=True)]
    print(f"{labels[0]:<19} {min(theirs):.1f} us {name} (best of {rounds})")
    print(f"{labels[1]:<19} {min(ours):.1f} us {name} (best of {rounds})")
    print(
        f"ratio     {min(ours) / min(theirs):.2f}x by the bests, "
        f"{statistics.median(ratios):.2f}x by the median of the rounds"
    )


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}")
    print(f"commit: {git_rev()}")
    fetcher, assignment = worker_assignment()
    print(f"assignment: {len(assignment.tps)} partitions, {TOPICS * PARTITIONS} paused")
    theirs: list[float] = []
    ours: list[float] = []
    for i in range(args.rounds):
        order = [(theirs, AIOKAFKA_PLAN), (ours, plan_actions)]
        for into, planner in order if i % 2 == 0 else reversed(order):
            into.append(timed(planner, fetcher, assignment, args.plans))
    compare("a plan", theirs, ours, args.rounds, ("aiokafka", "worker's"))
    # The same planner either way: what the one resume future saves.
    theirs, ours = [], []
    for i in range(args.rounds):
        order = [(theirs, plan_actions), (ours, plan)]
        for into, planner in order if i % 2 == 0 else reversed(order):
            into.append(await timed_turns(planner, fetcher, assignment, args.plans))
    compare(
        "a turn of the fetcher's loop (plan and wait)",
        theirs,
        ours,
        args.rounds,
        ("every resume future", "one resume future"),
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=7)
    # The planner reads pause futures, which need a running loop.
    asyncio.run(main(parser.parse_args()))
