"""The replay at scale: the recorded history as Spark records, grouped by the key that
decided each message, every key replayed by the pure core (:mod:`sagas.machinery.replay`)
on the executors. Equal to the local replay on the same history (tests/spark/test_replay.py).

A key's group holds its inputs (the records of its process topic) and the messages its
decisions sent: those whose cause is one of its inputs, found by joining causes with input
ids, and those a deadline of its caused, told by the same rule as the local replay
(:meth:`~sagas.machinery.replay.Recording.deadline_decisions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import reduce
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from runtime.settings import Settings
from runtime.topics import EVENTS
from sagas.machinery.replay import (
    Candidate,
    KeyHistory,
    KeyReplay,
    Recording,
    Replay,
    entity_owners,
    replay_key,
)
from sagas.machinery.replay_compare import Sent
from sagas.machinery.step import EVENTS_CHANNEL
from sagas.messages import ContractError, Envelope
from spark_projections.read import TopicMissing, fix_offsets, read_records

Decoded = tuple[str, int, int, Envelope]
"""(channel, partition, offset, envelope) of one record."""


def spark_replay(
    records: DataFrame,
    channel_of: Mapping[str, str],
    candidates: Mapping[str, Candidate],
    baselines: Mapping[str, Candidate] | None = None,
    earliest: Mapping[tuple[str, int], int] | None = None,
    letters: Mapping[tuple[str, int, int], str] | None = None,
) -> Replay:
    """Replay ``records`` (topic, partition, offset, value: the process topics and the
    event topic, as :func:`spark_projections.read.read_records` reads them); ``channel_of``
    names each topic's channel (the event topic's ``events``)."""
    channels = dict(channel_of)
    decoded = (
        records.select("topic", "partition", "offset", "value")
        .rdd.flatMap(lambda r: _decode(channels.get(r[0]), r[1], r[2], r[3]))
        .cache()
    )
    if decoded.isEmpty():
        return Replay([], 0)
    until: datetime = decoded.map(lambda d: d[3].occurred_at).max()
    inputs = decoded.filter(lambda d: d[0] != EVENTS_CHANNEL).map(
        lambda d: ((d[0], d[3].key), ("in", d))
    )
    input_ids = inputs.map(lambda kv: (kv[1][1][3].message_id, kv[0]))
    caused = decoded.filter(lambda d: d[3].causation_id is not None).map(
        lambda d: (d[3].causation_id, Sent(d[0], d[3]))
    )
    joined = caused.leftOuterJoin(input_ids)
    by_input = joined.filter(lambda kv: kv[1][1] is not None).map(
        lambda kv: (kv[1][1], ("out", kv[1][0]))
    )
    owners = entity_owners(candidates)
    by_deadline = (
        joined.filter(lambda kv: kv[1][1] is None)
        .map(lambda kv: (kv[0], kv[1][0]))
        .groupByKey()
        .flatMap(lambda kv: _deadline_decision(str(kv[0]), list(kv[1]), owners))
    )
    first = dict(earliest or {})
    dead = dict(letters or {})
    groups = inputs.union(by_input).union(by_deadline).groupByKey()
    replayed = groups.map(
        lambda kv: _replay(kv[0] or ("", ""), kv[1], candidates, baselines, first, dead, until)
    ).collect()
    keys = [r for r in replayed if isinstance(r, KeyReplay)]
    return Replay(keys, sum(r for r in replayed if isinstance(r, int)))


async def history_frame(
    spark: SparkSession, settings: Settings, channels: Sequence[str]
) -> tuple[DataFrame, dict[str, str], dict[tuple[str, int], int]]:
    """Every process topic of ``channels`` and the event topic, from their earliest records
    to their end offsets now, read by Spark's Kafka source; with each topic's channel and
    each partition's earliest offset (for :func:`spark_replay`)."""
    frames: list[DataFrame] = []
    channel_of: dict[str, str] = {}
    earliest: dict[tuple[str, int], int] = {}
    for channel in (*channels, EVENTS_CHANNEL):
        topic = settings.topic(EVENTS if channel == EVENTS_CHANNEL else channel)
        try:
            offsets = await fix_offsets(settings, topic)
        except TopicMissing:
            continue
        channel_of[topic] = channel
        earliest.update({(channel, p): o for p, o in offsets.start.items()})
        if any(offsets.end[p] > offsets.start[p] for p in offsets.end):
            frames.append(read_records(spark, settings, offsets))
    if not frames:
        return spark.createDataFrame([], _SCHEMA), channel_of, earliest
    return reduce(DataFrame.unionByName, frames), channel_of, earliest


_SCHEMA = "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"


def _decode(channel: str | None, partition: int, offset: int, value: Any) -> list[Decoded]:
    if channel is None or value is None:
        return []
    try:
        return [(channel, partition, offset, Envelope.decode(bytes(value)))]
    except ContractError:
        return []  # the worker dead-lettered it: no input, no message sent


def _deadline_decision(
    cause: str, sent: list[Sent], owners: Mapping[str, tuple[str, str]]
) -> Iterator[tuple[tuple[str, str], tuple[str, Any]]]:
    decider = Recording(sent).deadline_decisions(dict(owners))
    for key in decider:  # ("", ""): told to no key, counted as such
        yield key, ("deadline", cause)
        for s in sent:
            yield key, ("out", s)


def _replay(
    key: tuple[str, str],
    parts: Iterable[tuple[str, Any]],
    candidates: Mapping[str, Candidate],
    baselines: Mapping[str, Candidate] | None,
    earliest: Mapping[tuple[str, int], int],
    dead: Mapping[tuple[str, int, int], str],
    until: datetime,
) -> KeyReplay | int:
    """The key's replay; for a group of a key with no input, how many recorded deadline
    decisions were told to it (to no key the replay knows: as the local replay counts)."""
    channel, name = key
    ins: list[Decoded] = []
    outs: list[Sent] = []
    deadline_causes: list[str] = []
    for kind, value in parts:
        if kind == "in":
            ins.append(value)
        elif kind == "out":
            outs.append(value)
        else:
            deadline_causes.append(value)
    if not ins:
        return len(set(deadline_causes))
    candidate = candidates.get(channel)
    if candidate is None:
        return KeyReplay(channel, name, not_replayable="no definition listens there")
    ins.sort(key=lambda d: (d[1], d[2]))
    history = KeyHistory(
        channel,
        name,
        tuple(d[3] for d in ins),
        earliest.get((channel, ins[0][1]), 0),
        tuple(dict.fromkeys(deadline_causes)),
    )
    lettered = {
        d[3].message_id: dead[(channel, d[1], d[2])] for d in ins if (channel, d[1], d[2]) in dead
    }
    recording = Recording(outs, lettered)
    baseline = None if baselines is None else baselines.get(channel)
    return replay_key(history, candidate, recording, baseline, until)
