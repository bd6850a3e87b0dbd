"""The Debezium ingest edge without Kafka: real captured records in, the correlator's
commands out; garbage dead-lettered with its reason; positions stored only after every
send was acknowledged."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from sagas.contracts import legacy as lg
from sagas.definitions.legacy_correlator import correlation_key
from sagas.ids import derive_id
from sagas.legacy_ingest import marker_envelope
from sagas.messages import Envelope
from services.worker.deadletter import DeadLetter
from services.worker.ingest import DebeziumIngest
from services.worker.metrics import Metrics
from services.worker.runner import DictTable, Incoming

from .test_debezium_decode import records
from .test_runner import FakeKafka

pytestmark = pytest.mark.unit
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ingest(kafka: FakeKafka, table: DictTable, prefix: str) -> DebeziumIngest:
    return DebeziumIngest(
        name="legacy-ingest",
        table_topics=tuple(f"{prefix}.school.{t}" for t in ("student", "course", "student_course")),
        transaction_topic=f"{prefix}.transaction",
        correlator_topic="t.legacy-tx",
        table=table,
        send=kafka.send,
        dead_letter_topic="t.deadletter",
        metrics=Metrics(),
        clock=lambda: NOW,
    )


def captured(schemas: bool) -> list[Incoming]:
    """Every captured record, offsets numbered per topic as Kafka did."""
    out = []
    for r in records(schemas):
        value = None if r["value"] is None else r["value"].encode()
        key = None if r["key"] is None else r["key"].encode()
        out.append(Incoming(r["topic"], r["partition"], r["offset"], key, value))
    return out


def sent_to(kafka: FakeKafka, topic: str) -> list[Envelope]:
    return [Envelope.decode(v) for t, _, v in kafka.sent if t == topic]


@pytest.mark.parametrize("schemas", [True, False], ids=["schemas", "plain"])
async def test_every_captured_record_becomes_the_correlators_input(schemas: bool) -> None:
    kafka, table = FakeKafka(), DictTable()
    batch = captured(schemas)
    prefix = batch[0].topic.split(".")[0]
    await ingest(kafka, table, prefix).handle_batch(batch)
    out = sent_to(kafka, "t.legacy-tx")
    assert sent_to(kafka, "t.deadletter") == []
    changes = [e for e in out if e.type == lg.RowChanged.TYPE]
    ends = [e for e in out if e.type == lg.TransactionEnded.TYPE]
    tombstones = sum(1 for r in batch if r.value is None)
    begins = sum(1 for r in batch if r.value is not None and b'"BEGIN"' in r.value)
    assert len(changes) + len(ends) == len(batch) - tombstones - begins
    for env in changes:
        change = env.message()
        assert isinstance(change, lg.RowChanged)
        assert env.key == correlation_key(change)
        assert env.message_id == derive_id("debezium", change.position)
    assert ends and all(e.key.startswith("tx:") for e in ends)
    # Every partition's position moved past its last record, once the sends were acked.
    last = {(r.topic, r.partition): r.offset + 1 for r in batch}
    assert table.positions == last


async def test_the_same_records_again_get_the_same_ids() -> None:
    """A redelivery (Connect restarted) is a copy the correlator's machinery drops."""
    first, second = FakeKafka(), FakeKafka()
    batch = captured(False)
    prefix = batch[0].topic.split(".")[0]
    await ingest(first, DictTable(), prefix).handle_batch(batch)
    await ingest(second, DictTable(), prefix).handle_batch(batch)
    assert [e.message_id for e in sent_to(first, "t.legacy-tx")] == [
        e.message_id for e in sent_to(second, "t.legacy-tx")
    ]


async def test_an_unreadable_record_is_dead_lettered_with_its_reason_and_the_rest_go_on() -> None:
    kafka, table = FakeKafka(), DictTable()
    good = [r for r in captured(False) if r.topic.endswith(".student")][:1]
    prefix = good[0].topic.split(".")[0]
    topic = f"{prefix}.school.student"
    n = good[0].offset
    garbage = [
        Incoming(topic, 0, n + 1, b"k", b"{not json"),
        Incoming(topic, 0, n + 2, b"k", b'{"op": "c", "source": {"schema": "school"}}'),
        Incoming(f"{prefix}.transaction", 0, 7, b"k", b'{"status": "MAYBE"}'),
    ]
    await ingest(kafka, table, prefix).handle_batch([*good, *garbage])
    letters = [DeadLetter.decode(v) for t, _, v in kafka.sent if t == "t.deadletter"]
    assert [(x["offset"], x["stage"]) for x in letters] == [
        (n + 1, "legacy-ingest"),
        (n + 2, "legacy-ingest"),
        (7, "legacy-ingest"),
    ]
    assert all(x["reason"] for x in letters)
    assert "unknown table" in letters[1]["reason"]
    assert len(sent_to(kafka, "t.legacy-tx")) == 1
    assert table.positions[(topic, 0)] == n + 3  # the stream went on


async def test_nothing_is_stored_when_a_send_is_not_acknowledged() -> None:
    kafka, table = FakeKafka(fail=True), DictTable()
    batch = captured(False)
    prefix = batch[0].topic.split(".")[0]
    edge = ingest(kafka, table, prefix)
    with pytest.raises(ConnectionError):
        await edge.handle_batch(batch)
    assert table.positions == {}
    # Retried (as the worker does) once the broker is back: everything goes, then is stored.
    kafka.fail = False
    await edge.handle_batch(batch)
    assert table.positions


def _end(collections: list[tuple[str, int]]) -> bytes:
    return json.dumps(
        {
            "status": "END",
            "id": "771:34567",
            "event_count": sum(n for _, n in collections),
            "data_collections": [
                {"data_collection": name, "event_count": n} for name, n in collections
            ],
        }
    ).encode()


def test_an_end_record_counts_only_the_rows_of_the_tables_the_correlator_reads() -> None:
    """A connector that captures more tables counts their rows too: counted, they would
    hold the transaction open for rows that never reach the correlator."""
    both = marker_envelope(_end([("school.student", 1), ("school.audit", 4)]), NOW)
    assert both is not None
    assert both.message() == lg.TransactionEnded(tx_id=771, event_count=1)
    assert marker_envelope(_end([("school.audit", 4)]), NOW) is None  # none of ours
    listed = _end([("school.student", 1), ("school.course", 1), ("school.student_course", 1)])
    ours = marker_envelope(listed, NOW)
    assert ours is not None and ours.message() == lg.TransactionEnded(tx_id=771, event_count=3)
