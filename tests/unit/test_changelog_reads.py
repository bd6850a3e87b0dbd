"""A changelog record reaches Faust's recovery only from its partition's current read
(services/worker/changelog_reads.py, and its wiring on aiokafka in faust_seam).

Defect 16: records of a read that a rebalance ended were applied by the next generation's
standby, which moved its "seen" offset past the records between and then sought from there;
the store's persisted offset went past tombstones it never applied."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from aiokafka.consumer.subscription_state import SubscriptionState
from aiokafka.structs import TopicPartition
from faust.types import TP

from services.worker import faust_seam
from services.worker.changelog_reads import ChangelogReads, Read

pytestmark = pytest.mark.unit

CHANGELOG = TP("app-order-saga-state-changelog", 3)
INPUT = TP("app.order-saga", 3)


@dataclass(eq=False)
class Msg:
    tp: TP
    offset: int


def is_changelog(tp: TP) -> bool:
    return tp.topic.endswith("-changelog")


class State:
    """The client's state of one partition: its reads counted, its assignment current."""

    def __init__(self) -> None:
        self.reads = 0
        self.assigned = True


class Partitions:
    """The client's partitions, as the test moves them."""

    def __init__(self) -> None:
        self.now: dict[TP, State] = {CHANGELOG: State(), INPUT: State()}

    def read_of(self, tp: object) -> Read | None:
        state = self.now.get(tp)  # type: ignore[call-overload]
        return None if state is None else (state, state.reads)

    @staticmethod
    def goes_on(read: Read) -> bool:
        state, number = read
        assert isinstance(state, State)
        return state.assigned and state.reads == number

    def reads(self) -> ChangelogReads:
        return ChangelogReads(self.read_of, self.goes_on)

    def seek(self, tp: TP) -> None:
        self.now[tp].reads += 1

    def reassign(self, tp: TP) -> None:
        self.now[tp].assigned = False
        self.now[tp] = State()


def drained(reads: ChangelogReads, *messages: Msg) -> list[Msg]:
    reads.drained({m.tp: [m] for m in messages}, is_changelog)
    return list(messages)


def test_records_of_the_current_read_are_handed_on_and_stay_fresh() -> None:
    partitions = Partitions()
    reads = partitions.reads()
    batch = drained(reads, Msg(CHANGELOG, 281), Msg(CHANGELOG, 282))
    assert [reads.hand_on(m.tp, m) for m in batch] == [True, True]
    assert not any(reads.is_stale(m) for m in batch)
    assert not reads.skipped


@pytest.mark.parametrize("ends_the_read", [Partitions.seek, Partitions.reassign])
def test_a_seek_or_a_new_assignment_ends_the_read(ends_the_read: object) -> None:
    partitions = Partitions()
    reads = partitions.reads()
    first, second, third = drained(reads, Msg(CHANGELOG, 0), Msg(CHANGELOG, 1), Msg(CHANGELOG, 2))
    assert reads.hand_on(CHANGELOG, first)  # handed on, then waits in the recovery's queue
    ends_the_read(partitions, CHANGELOG)  # type: ignore[operator]
    # The rest of the batch is not handed on; the one handed on is refused where it waits.
    assert not reads.hand_on(CHANGELOG, second)
    assert not reads.hand_on(CHANGELOG, third)
    assert reads.skipped == {CHANGELOG: 2}
    assert reads.is_stale(first)
    # The new read's records are the recovery's.
    again = drained(reads, Msg(CHANGELOG, 0))[0]
    assert reads.hand_on(CHANGELOG, again) and not reads.is_stale(again)
    assert not reads.skipped


def test_input_records_are_not_the_recovery_s_and_never_stale() -> None:
    partitions = Partitions()
    reads = partitions.reads()
    record = drained(reads, Msg(INPUT, 9))[0]
    partitions.seek(INPUT)
    assert reads.hand_on(INPUT, record)
    assert not reads.is_stale(record)
    assert not reads.is_stale(SimpleNamespace(tp=CHANGELOG, offset=1))  # never stamped


def test_a_partition_unassigned_when_drained_is_not_handed_on() -> None:
    partitions = Partitions()
    del partitions.now[CHANGELOG]
    reads = partitions.reads()
    record = drained(reads, Msg(CHANGELOG, 4))[0]
    assert not reads.hand_on(CHANGELOG, record)


def test_skipped_records_are_said_once_per_batch(caplog: pytest.LogCaptureFixture) -> None:
    partitions = Partitions()
    reads = partitions.reads()
    batch = drained(reads, Msg(CHANGELOG, 7), Msg(CHANGELOG, 8))
    partitions.seek(CHANGELOG)
    for m in batch:
        reads.hand_on(m.tp, m)
    with caplog.at_level(logging.INFO):
        reads.report_skipped()
    assert [r.getMessage() for r in caplog.records] == [
        f"dropped 2 changelog record(s) of {CHANGELOG} read before the partition was sought "
        "again or reassigned: they are read again from where its recovery starts"
    ]


# --- on aiokafka's own subscription state ---------------------------------------------------


def client_with(*tps: TopicPartition) -> SimpleNamespace:
    """What faust_seam reads of Faust's consumer: ``_thread._consumer._subscription``."""
    subscription = SubscriptionState()
    subscription.subscribe({tp.topic for tp in tps})
    subscription.assign_from_subscribed(set(tps))
    client = SimpleNamespace(_subscription=subscription)
    return SimpleNamespace(_thread=SimpleNamespace(_consumer=client))


def state_of(consumer: SimpleNamespace, tp: TopicPartition) -> object:
    return consumer._thread._consumer._subscription.subscription.assignment.state_value(tp)


async def test_aiokafka_s_seeks_and_resets_begin_a_read_and_consuming_does_not() -> None:
    faust_seam.count_partition_reads()
    tp = TopicPartition(CHANGELOG.topic, CHANGELOG.partition)
    consumer = client_with(tp)
    state: object = state_of(consumer, tp)
    read = faust_seam._partition_read(consumer, CHANGELOG)  # a Faust TP finds aiokafka's
    assert read is not None and read[0] is state
    steps = [
        lambda s: s.reset_to(0),  # the position a reset found
        lambda s: s.consumed_to(40),  # records drained: the same read
        lambda s: s.seek(281),  # the recovery seeks
        lambda s: s.await_reset(1),  # the position dropped
    ]
    ended = []
    for step in steps:
        step(state)
        ended.append(not faust_seam._read_goes_on(read))
        now = faust_seam._partition_read(consumer, CHANGELOG)
        assert now is not None and faust_seam._read_goes_on(now)
        read = now
    assert ended == [True, False, True, True]


async def test_a_new_assignment_is_a_new_read_and_an_unassigned_partition_has_none() -> None:
    tp = TopicPartition(CHANGELOG.topic, CHANGELOG.partition)
    consumer = client_with(tp)
    before = faust_seam._partition_read(consumer, CHANGELOG)
    assert before is not None and faust_seam._read_goes_on(before)
    subscription = consumer._thread._consumer._subscription
    subscription.assign_from_subscribed({tp})  # the next generation keeps the partition
    assert not faust_seam._read_goes_on(before)
    after = faust_seam._partition_read(consumer, CHANGELOG)
    assert after is not None and after[0] is not before[0] and faust_seam._read_goes_on(after)
    subscription.assign_from_subscribed({TopicPartition(CHANGELOG.topic, 0)})
    assert faust_seam._partition_read(consumer, CHANGELOG) is None
    assert faust_seam._partition_read(SimpleNamespace(), CHANGELOG) is None  # not started
