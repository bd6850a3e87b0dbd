"""A worker killed with SIGKILL mid-run: every saga still ends, no unit sold twice or lost,
every enrollment settles with no course overbooked and no seat held twice or left behind."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.topics import create_topics
from tests.integration.harness import isolated_settings, running_stack, settings_env

pytestmark = [pytest.mark.integration]

PRODUCTS = [f"crash-{i}" for i in range(10)]
STOCK = 30
COURSES = {"crash-course-0": 4, "crash-course-1": 5, "crash-course-2": 6}
STUDENTS = [f"crash-student-{i}" for i in range(20)]


async def test_sigkill_in_the_middle_of_500_orders(tmp_path: Path) -> None:
    rnd = random.Random(7)
    async with running_stack(isolated_settings(tmp_path), tmp_path) as stack:
        for product in PRODUCTS:
            await stack.set_stock(product, STOCK)
        # Enrollment sagas run beside the orders: the same worker, the same kill.
        for course, seats in COURSES.items():
            await stack.set_course(course, seats, credits=3)
        for student in STUDENTS:
            await stack.set_student(student, max_credits=9)
        enrollments: list[str] = []
        lines = {}
        orders = []
        for i in range(500):
            if i % 4 == 0:
                student = STUDENTS[(i // 4) % len(STUDENTS)]
                enrollment, _ = await stack.enroll(student, rnd.choice(list(COURSES)))
                enrollments.append(enrollment)
            if i % 20 == 10:
                await stack.drop(rnd.choice(enrollments))
            if i % 20 == 15:
                await stack.transfer(rnd.choice(enrollments), rnd.choice(list(COURSES)))
            picked = rnd.sample(PRODUCTS, rnd.choice([1, 1, 2]))
            method = "decline" if i % 10 == 0 else "card"
            order = await stack.place([(p, 1) for p in picked], method=method, customer=f"k{i}")
            lines[order] = picked
            orders.append(order)
            if i == 250:  # half placed, many mid-flight: kill without any shutdown
                while len(stack.tail.outcomes) < 100:
                    await asyncio.sleep(0.01)
                await asyncio.to_thread(stack.worker.kill)
                restart = asyncio.create_task(asyncio.to_thread(stack.worker.start))
        await restart
        outcomes = await stack.tail.wait_for(orders, 120)
        assert len(outcomes) == 500, f"{500 - len(outcomes)} sagas never ended"

        # Replays after the crash may repeat an event, never contradict one.
        await stack.assert_settled(outcomes, lines, dict.fromkeys(PRODUCTS, STOCK))
        # The run did exercise both outcomes.
        statuses = [o.status for o in outcomes.values()]
        assert statuses.count("CONFIRMED") > 50 and statuses.count("REJECTED") > 50

        settled = await stack.assert_enrollments_settled(enrollments)
        kinds = set(settled.values())
        assert {"ENROLLED", "WAITLISTED", "DROPPED", "REJECTED"} <= kinds, kinds


async def test_worker_refuses_to_start_when_partition_counts_differ(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path, partitions=4)
    await create_topics(settings)
    wrong = settings.model_copy(update={"partitions": 6})
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "sagaline.cli", "worker"],
        env=settings_env(wrong),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "refusing to start" in result.stderr
    assert "4 partitions, declared 6" in result.stderr
