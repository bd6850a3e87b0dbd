"""Re-driving a dead letter, on the real broker, with a real worker process.

The worker runs first with ``SAGALINE_MAX_MESSAGE_BYTES`` at its 10,000-byte floor, so an
order of 100 long product ids (its ``order.Placed`` is about 15 kB) is dead-lettered
("nothing of it was applied"). The fix is deployed (the worker restarts with the default
limit); ``sagaline deadletters list`` shows the letter, ``redrive`` sends the original record
back once and the saga runs to its end; a second ``redrive`` is refused; ``--force`` sends it
again and the worker drops it as a duplicate (same message id): the order is placed once.
Both ways of carrying the record are covered: inline, and by digest only (read back from
the source topic at its offset).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.partitioner import partition_for
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, ORDER_SAGA, REDRIVES
from sagas.contracts import orders as oc
from services.worker.deadletter import DeadLetter
from tests.integration.harness import (
    Stack,
    isolated_settings,
    produce_raw,
    read_all,
    running_stack,
    settings_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

LINES = 100
"""The most lines an order may have; each with a 90-character product id."""


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sagaline.cli", "deadletters", *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def _letters(settings: Settings, count: int, timeout: float = 60) -> list[dict[str, object]]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        letters = [json.loads(r.value) for r in await read_all(settings, DEAD_LETTERS)]
        if len(letters) >= count or asyncio.get_running_loop().time() > deadline:
            return letters
        await asyncio.sleep(0.5)


async def _processed_behind(stack: Stack, order_id: str) -> set[str]:
    """Place orders until one lands on ``order_id``'s partition and wait for its outcome:
    it came after every earlier record of that partition, so those were processed by then.
    The types of ``order_id``'s events at that point."""
    every = list(range(stack.settings.partitions))
    wanted = partition_for(order_id.encode(), every, every)
    while True:
        behind = await stack.place([("p-none", 1)])
        if partition_for(behind.encode(), every, every) == wanted:
            break
    assert (await stack.tail.wait_for([behind], 60)).get(behind) is not None
    return {e.type for e in stack.tail.events_of(f"order:{order_id}")}


async def _placed_once_then_cancel_refused(stack: Stack, order_id: str) -> None:
    """A cancel sent after the forced re-drive lands behind it on the order's partition:
    once its refusal shows, the re-driven copy was processed, and it placed nothing."""
    response = await stack.http.post(f"/orders/{order_id}/cancel", json={})
    assert response.status_code == 202, response.text
    key = f"order:{order_id}"
    deadline = asyncio.get_running_loop().time() + 60
    while not any(e.type == oc.CancelRefused.TYPE for e in stack.tail.events_of(key)):
        assert asyncio.get_running_loop().time() < deadline, "the cancel was never refused"
        await asyncio.sleep(0.1)
    placed = [e for e in stack.tail.events_of(key) if e.type == oc.OrderPlaced.TYPE]
    assert len(placed) == 1


@pytest.mark.parametrize("inline_max", [256 * 1024, 1024], ids=["inline", "by-digest"])
async def test_a_dead_lettered_order_is_redriven_once_after_the_fix(
    tmp_path: Path, inline_max: int
) -> None:
    # A long store span: the letter's position is still pending when the worker is stopped,
    # so only the clean stop's store keeps the restart from deciding the record again.
    strict = isolated_settings(
        tmp_path,
        max_message_bytes=10_000,
        deadletter_inline_max_bytes=inline_max,
        store_every_ms=5_000,
    )
    async with running_stack(strict, tmp_path) as stack:
        lines = [(f"p{i:02d}-" + "x" * 86, 1) for i in range(LINES)]
        order_id = await stack.place(lines)
        [letter] = await _letters(strict, 1)
        assert "SAGALINE_MAX_MESSAGE_BYTES" in str(letter["reason"])
        assert letter["value_inline"] is (inline_max > 10_000)

        # The fix: the worker restarts with the default limit. The letter stays parked.
        fixed = strict.model_copy(update={"max_message_bytes": Settings().max_message_bytes})
        stack.worker.stop()
        stack.worker.settings = fixed
        await asyncio.to_thread(stack.worker.start)
        # The clean stop stored the letter's position: the restart does not decide the
        # record again (under the raised limit it would place the order, beside its letter).
        assert oc.OrderPlaced.TYPE not in await _processed_behind(stack, order_id)

        listed = _cli(fixed, "list")
        assert listed.returncode == 0, listed.stderr
        [line] = listed.stdout.splitlines()
        letter_offset = line.split()[0]
        assert "parked" in line and "over the 10000-byte limit" in line
        shown = json.loads(_cli(fixed, "show", letter_offset).stdout)
        assert shown["redriven"] is None and shown["source_topic"] == strict.topic(ORDER_SAGA)

        first = _cli(fixed, "redrive", letter_offset)
        assert first.returncode == 0, first.stderr
        assert f"re-drove {letter['source_topic']}:{letter['partition']}:" in first.stdout
        outcome = (await stack.tail.wait_for([order_id], 90)).get(order_id)
        assert outcome is not None, "the re-driven order never ended"
        assert outcome.status == "REJECTED"  # no stock for any of its lines: processed

        second = _cli(fixed, "redrive", letter_offset)
        assert second.returncode != 0
        assert "was re-driven at" in second.stderr and "--force" in second.stderr
        assert "re-driven" in _cli(fixed, "list").stdout.splitlines()[0]

        forced = _cli(fixed, "redrive", letter_offset, "--force")
        assert forced.returncode == 0, forced.stderr
        assert "again (forced)" in forced.stdout
        await _placed_once_then_cancel_refused(stack, order_id)
        assert len(await _letters(fixed, 1)) == 1  # the re-driven record was not parked again


async def test_an_unknown_letter_offset_is_a_sentence(tmp_path: Path) -> None:
    settings = isolated_settings(tmp_path)
    from runtime.topics import create_topics

    await create_topics(settings)
    refused = _cli(settings, "redrive", "7")
    assert refused.returncode == 1
    assert "no dead letter at offset 7" in refused.stderr
    assert "Traceback" not in refused.stderr


@dataclass(frozen=True)
class _Parked:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


async def test_list_pages_the_topic_and_a_redrive_to_a_foreign_topic_is_refused(
    tmp_path: Path,
) -> None:
    settings = isolated_settings(tmp_path)
    from runtime.topics import create_topics

    await create_topics(settings)
    for n in range(5):  # 0, 2, 4 from a process channel; 1, 3 from someone else's topic
        source = settings.topic(ORDER_SAGA) if n % 2 == 0 else "payments.ledger"
        letter = DeadLetter.of(_Parked(source, 0, n, b"k", b"{}"), f"broken {n}", "order-saga")
        await produce_raw(settings, DEAD_LETTERS, b"k", letter.encode())

    newest = _cli(settings, "list", "--limit", "2")
    assert newest.returncode == 0, newest.stderr
    assert [line.split()[0] for line in newest.stdout.splitlines()] == ["4", "3"]
    assert "sagaline deadletters list --before 3 --limit 2" in newest.stderr
    older = _cli(settings, "list", "--before", "3", "--limit", "2")
    assert [line.split()[0] for line in older.stdout.splitlines()] == ["2", "1"]
    oldest = _cli(settings, "list", "--before", "1")
    assert [line.split()[0] for line in oldest.stdout.splitlines()] == ["0"]
    assert "--before" not in oldest.stderr

    refused = _cli(settings, "redrive", "3", "--force")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "letter 3 came from payments.ledger, which is not one of Sagaline's" in refused.stderr
    assert len(await read_all(settings, ORDER_SAGA)) == 0  # nothing was sent anywhere
    assert await read_all(settings, REDRIVES) == []
