"""Incremental fetch sessions (services/worker/fetch_sessions.py): what each request sends,
and the session kept only from what the broker acknowledged. On the real broker:
tests/integration/test_fetch_sessions.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.protocol.fetch import FetchRequest, FetchRequest_v4, FetchRequest_v11
from aiokafka.structs import TopicPartition

from services.worker.fetch_sessions import MAX_EPOCH, FetchSession

pytestmark = pytest.mark.unit

MAX_BYTES = 1_048_576


def fetch(**offsets: int) -> FetchRequest:
    """aiokafka's request of every fetchable partition: ``t_0=5`` is topic t, partition 0 at 5."""
    topics: dict[str, list[tuple[int, int, int]]] = {}
    for name, offset in offsets.items():
        topic, partition = name.rsplit("_", 1)
        topics.setdefault(topic, []).append((int(partition), offset, MAX_BYTES))
    return FetchRequest(500, 1, 52_428_800, 0, list(topics.items()))


def answer(session_id: int = 0, error_code: int = 0, version: int = 11) -> Any:
    return SimpleNamespace(API_VERSION=version, error_code=error_code, session_id=session_id)


def sent(struct: Any) -> dict[str, Any]:
    """The session fields and the partitions (topic, partition, offset) a struct carries."""
    partitions = sorted(
        (topic, p[0], p[2]) for topic, parts in struct.topics for p in parts
    )  # v11: (partition, leader epoch, fetch offset, log start, max bytes)
    return {
        "session": (struct.session_id, struct.session_epoch),
        "partitions": partitions,
        "forgotten": sorted((t, p) for t, ps in struct.forgotten_topics_data for p in ps),
    }


def test_the_first_request_is_full_and_opens_a_session() -> None:
    session = FetchSession()
    request = session.request(fetch(a_0=5, a_1=7, b_0=0))
    assert sent(request.build(FetchRequest_v11)) == {
        "session": (0, 0),
        "partitions": [("a", 0, 5), ("a", 1, 7), ("b", 0, 0)],
        "forgotten": [],
    }
    session.answered(request, answer(session_id=42))
    assert (session.id, session.epoch) == (42, 1)
    assert session.partitions == {
        TopicPartition("a", 0): 5,
        TopicPartition("a", 1): 7,
        TopicPartition("b", 0): 0,
    }


def test_then_each_request_sends_what_changed_and_reads_as_the_full_one() -> None:
    session = FetchSession()
    session.answered(session.request(fetch(a_0=5, a_1=7, b_0=0)), answer(session_id=42))
    full = fetch(a_0=9, a_1=7, c_0=3)  # a-0 moved, b-0 paused (not fetchable), c-0 assigned
    request = session.request(full)
    assert sent(request.build(FetchRequest_v11)) == {
        "session": (42, 1),
        "partitions": [("a", 0, 9), ("c", 0, 3)],
        "forgotten": [("b", 0)],
    }
    assert request.topics == full.topics  # aiokafka reads each answer's fetch offset there
    session.answered(request, answer(session_id=42))
    assert session.epoch == 2
    assert session.partitions == {
        TopicPartition("a", 0): 9,
        TopicPartition("a", 1): 7,
        TopicPartition("c", 0): 3,
    }
    nothing_new = session.request(fetch(a_0=9, a_1=7, c_0=3))
    assert sent(nothing_new.build(FetchRequest_v11))["partitions"] == []


@pytest.mark.parametrize("error_code", [70, 71])  # session not found, invalid epoch
def test_a_session_error_starts_again_in_full(error_code: int) -> None:
    session = FetchSession()
    session.answered(session.request(fetch(a_0=5, a_1=7)), answer(session_id=42))
    session.answered(session.request(fetch(a_0=6, a_1=7)), answer(42, error_code))
    assert (session.id, session.epoch, session.partitions) == (0, 0, {})
    again = session.request(fetch(a_0=6, a_1=7))
    assert sent(again.build(FetchRequest_v11))["partitions"] == [("a", 0, 6), ("a", 1, 7)]


def test_a_broker_that_keeps_no_session_is_asked_in_full_each_time() -> None:
    session = FetchSession()
    session.answered(session.request(fetch(a_0=5)), answer(session_id=0))  # its cache full
    request = session.request(fetch(a_0=6))
    assert sent(request.build(FetchRequest_v11))["session"] == (0, 0)


def test_a_broker_without_sessions_gets_aiokafkas_full_request() -> None:
    session = FetchSession()
    session.answered(session.request(fetch(a_0=5)), answer(42))
    request = session.request(fetch(a_0=6, a_1=1))
    struct = request.build(FetchRequest_v4)  # no session fields before v7
    assert sorted((p[0], p[1]) for _, parts in struct.topics for p in parts) == [(0, 6), (1, 1)]
    session.answered(request, answer(version=4))
    assert session.id == 0


def test_the_epoch_wraps_to_one() -> None:
    session = FetchSession(id=42, epoch=MAX_EPOCH, partitions={TopicPartition("a", 0): 5})
    session.answered(session.request(fetch(a_0=5)), answer(42))
    assert session.epoch == 1
