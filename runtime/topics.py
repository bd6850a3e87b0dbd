"""Every topic Sagaline uses, declared once with its partitions, retention and records.

``sagaline topics create`` creates them; the worker checks them at start and refuses to run
when a topic is missing or its partition count differs from the declaration, because keyed
state (tables, changelogs) is only correct while a key keeps its partition. What each topic's
records are (:class:`Records`: key, message types, who writes and who reads) is declared
here too, from the saga core's declarations: the AsyncAPI document
(``scripts/export_asyncapi.py``) iterates over :func:`documented_topics` and nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError
from pydantic import BaseModel

from runtime.kafka_security import aiokafka_options, unreachable
from runtime.settings import Settings
from sagas.catalog import CHANNELS, facts
from sagas.catalog import INVENTORY as INVENTORY
from sagas.catalog import ORDER_SAGA as ORDER_SAGA
from sagas.catalog import PAYMENT as PAYMENT
from sagas.catalog import PROCESS_CHANNELS as PROCESS_CHANNELS
from sagas.contracts import debezium_records
from sagas.contracts.deadletters import DeadLetterBody, RedriveRecord
from sagas.contracts.legacy import ROW_MODELS, SCHEMA
from sagas.messages import Message

# Logical channels: the saga core names its processes' (sagas.catalog); each maps to one topic.
EVENTS = "events"
DEAD_LETTERS = "deadletter"
REDRIVES = "deadletter-redriven"
"""Which dead letters were re-driven: one record per letter's source position (compacted)."""


CHANGELOG_CONFIG: dict[str, str] = {
    "cleanup.policy": "compact",
    # Compaction never touches the active segment: a changelog that rolls a segment only at
    # Kafka's defaults (7 days or 1 GiB) keeps a week of every key's superseded values and
    # of retired keys' records, tombstones included, whatever the worker deletes. Fifteen
    # minutes (a quarter of SAGALINE_RETIRE_AFTER_S's default), or 64 MiB on a busy
    # changelog, bounds what waits there: a segment of a whole retention's writes holds as
    # many records as the live keys, so the log swung between one and two times its live
    # size with each roll (the soak's runs 16-17), and a recovering worker read whichever.
    # The price: four cleaner passes where there was one, each rewriting the log (about 3%
    # of a broker core in the soak at its shortened timings: BENCHMARKS.md, runs 18-19).
    "segment.ms": str(900_000),
    "segment.bytes": str(64 * 1024 * 1024),
    # Clean once a tenth of the log is superseded (Kafka's 0.5 lets a changelog grow to
    # twice its live keys between passes): the changelog, which a recovering worker reads
    # from its start, stays near the live keys' size, for a cleaner pass ten times as often.
    "min.cleanable.dirty.ratio": "0.1",
    # Whatever the ratio, a record is compacted within 6 hours of its write: a deleted key's
    # old values and tombstone do not wait for the log to get dirty enough.
    "max.compaction.lag.ms": str(6 * 3_600_000),
    # A tombstone stays a day after the pass that compacted what it deletes: a worker that
    # recovers from a local store older than that may miss it and keep the key, so a worker
    # discards such stores before it opens them (services/worker/stale_stores.py). A day of
    # tombstones is what a worker down longer replays in full instead.
    "delete.retention.ms": str(24 * 3_600_000),
}
"""The topic config of every Faust changelog: a compacted log that sheds deleted keys
(tombstones) and superseded values within hours. ``sagaline topics create`` sets it on new
changelogs and corrects existing ones (:func:`correct_configs`)."""


@dataclass(frozen=True)
class Records:
    """What a topic's records are, for the people and programs that produce or read them."""

    summary: str
    key: str
    """What a record's key (UTF-8) holds: it decides the partition, hence the order."""
    messages: tuple[type[Message], ...] = ()
    """Contracts that travel in the envelope (``sagas.messages.Envelope``), by ``type``."""
    body: type[BaseModel] | None = None
    """The value's model when it is not an envelope (a dead letter, a Debezium change)."""
    producers: str = ""
    consumers: str = ""
    internal: bool = False
    """Not a contract: nobody outside Sagaline produces or reads it."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)
    channel: str = ""
    """The logical channel the name is made from (``settings.topic(channel)``)."""
    records: Records | None = None


def declared_topics(settings: Settings) -> list[TopicSpec]:
    """Every topic Sagaline creates (``sagaline topics create``) and checks at start."""
    n = settings.partitions
    commands = {"cleanup.policy": "delete", "retention.ms": str(settings.command_retention_ms)}
    specs = [
        TopicSpec(settings.topic(ch.name), n, commands, ch.name, _process_records(ch.name))
        for ch in CHANNELS
    ]
    specs.append(
        TopicSpec(
            settings.topic(EVENTS),
            n,
            {"cleanup.policy": "delete", "retention.ms": str(settings.event_retention_ms)},
            EVENTS,
            Records(
                "The domain events: every fact of every entity, in order per entity. "
                "`entity_type` and `sequence` (1, 2, 3... per entity, no gaps) are set.",
                key="`<entity_type>:<entity id>` (`order:o-1`, `product:p-1`): one entity's "
                "facts stay on one partition, in sequence order",
                messages=facts(),
                producers="the worker (each process publishes its own entity's facts)",
                consumers="the projector (read models), the Spark rebuild, the API's timelines",
            ),
        )
    )
    specs.append(
        TopicSpec(
            settings.topic(DEAD_LETTERS),
            1,
            {"retention.ms": str(30 * 24 * 3600 * 1000)},
            DEAD_LETTERS,
            Records(
                "Records a component could not process (a broken contract, an error, a "
                "decision too large to send), parked with the reason; never dropped.",
                key="the original record's key (`sha256:<hex>` of it when over 1024 bytes); "
                "the worker writes an empty key when the record had none, the projector none",
                body=DeadLetterBody,
                producers="the worker, the projector",
                consumers="`sagaline deadletters list|show|redrive`",
            ),
        )
    )
    specs.append(
        TopicSpec(
            settings.topic(REDRIVES),
            1,
            {"cleanup.policy": "compact"},
            REDRIVES,
            Records(
                "Which dead letters were re-driven, one record per parked record (compacted: "
                "the latest re-drive of each is kept).",
                key="the letter's source position `<topic>:<partition>:<offset>`",
                body=RedriveRecord,
                producers="`sagaline deadletters redrive`",
                consumers="`sagaline deadletters redrive` (refuses a second without --force)",
            ),
        )
    )
    # Faust's table changelogs: compacted, one partition per source partition.
    specs.extend(
        TopicSpec(
            changelog_topic(settings, ch),
            n,
            dict(CHANGELOG_CONFIG),
            records=Records(
                f"The changelog of the `{table_name(ch)}` table (Faust): the worker's state "
                "per key, restored from here after a crash or a rebalance.",
                key=f"the key of a record on the `{ch}` channel",
                producers="the worker",
                consumers="the worker",
                internal=True,
            ),
        )
        for ch in PROCESS_CHANNELS
    )
    # The CDC ingest's positions, partitioned like the Debezium topics it reads, so Faust
    # assigns a Debezium partition and its positions to the same worker. Declared whether CDC
    # is on or not: `sagaline topics create` runs before a worker is told to read Debezium.
    specs.append(
        TopicSpec(
            changelog_topic(settings, LEGACY_INGEST),
            settings.cdc_topic_partitions,
            dict(CHANGELOG_CONFIG),
            records=Records(
                f"The changelog of the `{table_name(LEGACY_INGEST)}` table (Faust): the CDC "
                "ingest's read position in each Debezium topic partition, stored only after "
                "the changes it sent on were acknowledged.",
                key="\\u0000position/<Debezium topic>/<partition>",
                producers="the worker",
                consumers="the worker",
                internal=True,
            ),
        )
    )
    return specs


def _process_records(channel: str) -> Records:
    declared = next(c for c in CHANNELS if c.name == channel)
    return Records(
        f"The `{channel}` process's channel: the commands it is sent and the replies it "
        f"awaits ({declared.definition.__name__}.ACCEPTS), and the machinery's ticks that fire "
        "its deadlines.",
        key=declared.key,
        messages=declared.accepts,
        producers="the API, the worker (commands and replies of other processes), its own "
        "deadline timer (ticks); any team producing commands straight to Kafka",
        consumers=f"the worker's `{channel}` agent",
    )


LEGACY_INGEST = "legacy-ingest"
"""The worker's Debezium ingest edge: names its agent and its table of read positions."""


def legacy_table_topics(settings: Settings) -> list[str]:
    """Debezium's change topics of the legacy tables: ``<prefix>.<schema>.<table>``."""
    return [f"{settings.cdc_topic_prefix}.{SCHEMA}.{table}" for table in ROW_MODELS]


def _key_shape(table: str) -> str:
    """A legacy table's record key as Debezium writes it: ``{"id": ...}``."""
    return "{" + ", ".join(f'"{column}": ...' for column in ROW_MODELS[table].KEY) + "}"


def legacy_transaction_topic(settings: Settings) -> str:
    """Debezium's transaction metadata topic (``provide.transaction.metadata=true``)."""
    return f"{settings.cdc_topic_prefix}.transaction"


def external_topics(settings: Settings) -> list[TopicSpec]:
    """Topics Sagaline reads but does not own: Debezium's, created by Kafka Connect (the
    local worker: ``deploy/local/connect.sh start``; or an existing deployment's). Never
    created by ``topics create``; checked at the worker's start when CDC is on, since the
    ingest's positions table is partitioned like them; always in the AsyncAPI document."""
    n = settings.cdc_topic_partitions
    debezium = "Debezium's PostgreSQL connector (Kafka Connect)"
    ingest = f"the worker's `{LEGACY_INGEST}` edge (SAGALINE_CDC_ENABLED)"
    wrapper = (
        " With the JSON converter's schemas.enable=true the value is "
        '{"schema": ..., "payload": <this>}; a tombstone (null value) follows each delete.'
    )
    specs = [
        TopicSpec(
            topic,
            n,
            records=Records(
                f"Changes of the legacy `{SCHEMA}.{table}` table, one per row change.{wrapper}",
                key=f"Debezium's JSON of the row's primary key: {_key_shape(table)}",
                body=debezium_records.BY_TABLE[table],
                producers=debezium,
                consumers=ingest,
            ),
        )
        for table, topic in zip(ROW_MODELS, legacy_table_topics(settings), strict=True)
    ]
    specs.append(
        TopicSpec(
            legacy_transaction_topic(settings),
            n,
            records=Records(
                "BEGIN and END of every source transaction (provide.transaction.metadata=true)"
                f": END's event_count closes the transaction in the correlator.{wrapper}",
                key='Debezium\'s JSON {"id": "<txId>:<lsn>"}',
                body=debezium_records.DebeziumTransaction,
                producers=debezium,
                consumers=ingest,
            ),
        )
    )
    return specs


def documented_topics(settings: Settings) -> list[TopicSpec]:
    """Every topic the AsyncAPI document describes: Sagaline's own, then the external ones."""
    return [*declared_topics(settings), *external_topics(settings)]


def table_name(channel: str) -> str:
    return f"{channel}-state"


def changelog_topic(settings: Settings, channel: str) -> str:
    return f"{settings.app_id}-{table_name(channel)}-changelog"


class TopicMismatch(RuntimeError):
    """A declared topic is missing or has another partition count than declared."""


async def create_topics(settings: Settings, specs: Sequence[TopicSpec] | None = None) -> list[str]:
    """Create every declared topic (or every one of ``specs``) that does not exist yet;
    returns the names created. Raises :class:`TopicMismatch` naming each topic the broker
    refused to create."""
    admin = await _started_admin(settings)
    try:
        existing = set(await admin.list_topics())
        wanted = declared_topics(settings) if specs is None else specs
        missing = [s for s in wanted if s.name not in existing]
        if missing:
            response = await admin.create_topics(
                [
                    NewTopic(
                        s.name, s.partitions, settings.replication_factor, topic_configs=s.config
                    )
                    for s in missing
                ]
            )
            _raise_refusals(response.topic_errors)
        return [s.name for s in missing]
    finally:
        await admin.close()


async def correct_configs(
    settings: Settings, specs: Sequence[TopicSpec] | None = None
) -> list[str]:
    """Set, on every declared topic (or every one of ``specs``) that exists, each config its
    declaration names and the broker holds otherwise; returns a line per topic changed,
    saying what changed (``topic: segment.ms 604800000 -> 900000``). The topic's other
    configs set on it are kept (an alter replaces a topic's whole set: they are sent too)."""
    admin = await _started_admin(settings)
    try:
        wanted = declared_topics(settings) if specs is None else specs
        existing = set(await admin.list_topics())
        targets = [s for s in wanted if s.name in existing and s.config]
        if not targets:
            return []
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, s.name) for s in targets]
        )
        current = _topic_configs(described)
        lines: list[str] = []
        changes: list[ConfigResource] = []
        for spec in targets:
            values, dynamic = current.get(spec.name, ({}, {}))
            differ = {k: v for k, v in spec.config.items() if values.get(k) != v}
            if not differ:
                continue
            changes.append(
                ConfigResource(ConfigResourceType.TOPIC, spec.name, {**dynamic, **spec.config})
            )
            said = ", ".join(f"{k} {values.get(k, '?')} -> {v}" for k, v in differ.items())
            lines.append(f"{spec.name}: {said}")
        if changes:
            response = await admin.alter_configs(changes)
            refused = [
                f"{name}: {message or f'error code {code}'}"
                for reply in response
                for code, message, _, name in reply.resources
                if code
            ]
            if refused:
                raise TopicMismatch("the broker refused to change " + "; ".join(refused))
        return lines
    finally:
        await admin.close()


async def tombstone_retention(settings: Settings) -> timedelta:
    """The shortest ``delete.retention.ms`` the broker holds for the worker's changelogs: how
    long a tombstone outlives the compaction of what it deletes, which bounds the age of a
    local store that can be trusted (services/worker/stale_stores.py). CHANGELOG_CONFIG's
    value for a changelog not created yet; :class:`TopicMismatch` when the broker answers
    with an error for one."""
    declared = int(CHANGELOG_CONFIG["delete.retention.ms"])
    admin = await _started_admin(settings)
    try:
        names = [s.name for s in declared_topics(settings) if s.config == CHANGELOG_CONFIG]
        existing = set(await admin.list_topics())
        asked = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names if n in existing]
        response = await admin.describe_configs(asked) if asked else []
    finally:
        await admin.close()
    refused = [
        f"{name}: {message or f'error code {code}'}"
        for reply in response
        for code, message, _, name, _ in reply.resources
        if code
    ]
    if refused:
        raise TopicMismatch("the broker did not describe " + "; ".join(refused))
    described = _topic_configs(response)
    held = [int(v) for values, _ in described.values() if (v := values.get("delete.retention.ms"))]
    return timedelta(milliseconds=min([declared, *held]))


def _topic_configs(
    described: Any,
) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """topic -> (every config's value, the configs set on the topic itself), from aiokafka's
    DescribeConfigs responses (one per broker asked)."""
    found: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
    for response in described:
        for _code, _message, _type, name, entries in response.resources:
            values: dict[str, str] = {}
            dynamic: dict[str, str] = {}
            for key, value, _read_only, source, *_ in entries:
                values[key] = value
                # v0 says whether it is a default; v1+ its source (1: set on the topic)
                own = not source if isinstance(source, bool) else source == _SET_ON_TOPIC
                if own and value is not None:
                    dynamic[key] = value
            found[name] = (values, dynamic)
    return found


_SET_ON_TOPIC = 1
"""DescribeConfigs' source of a config set on the topic itself (DYNAMIC_TOPIC_CONFIG)."""


async def _started_admin(settings: Settings) -> AIOKafkaAdminClient:
    """An admin client, started; :class:`KafkaUnreachable` says why not (a refused login)."""
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    try:
        await admin.start()
    except KafkaError as exc:
        await admin.close()
        raise await unreachable(settings, exc) from exc
    return admin


TOPIC_ALREADY_EXISTS = 36


def _raise_refusals(topic_errors: list[tuple[Any, ...]]) -> None:
    refused = [
        f"{topic}: {message or f'error code {code}'}"
        for topic, code, message, *_ in topic_errors
        if code not in (0, TOPIC_ALREADY_EXISTS)  # another process may have just made it
    ]
    if refused:
        raise TopicMismatch("the broker refused to create " + "; ".join(refused))


async def broker_answers(settings: Settings) -> None:
    """Return once a client could start; :class:`KafkaUnreachable` says why not."""
    admin = await _started_admin(settings)
    await admin.close()


async def check_topics(settings: Settings, wait_s: float = 10.0) -> None:
    """Raise :class:`TopicMismatch` naming every topic that is missing or mis-partitioned.

    A broker started a moment ago may not list topics it just created yet: a missing topic
    is asked about again for up to ``wait_s`` before it counts as missing."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        problems, missing_only = await _topic_problems(settings)
        if not problems:
            return
        if not missing_only or asyncio.get_running_loop().time() >= deadline:
            raise TopicMismatch("; ".join(problems))
        await asyncio.sleep(0.5)


async def _topic_problems(settings: Settings) -> tuple[list[str], bool]:
    admin = await _started_admin(settings)
    # Debezium's topics are checked only when the worker reads them.
    external = {s.name for s in external_topics(settings)} if settings.cdc_enabled else set()
    try:
        specs = [
            *declared_topics(settings),
            *(s for s in external_topics(settings) if s.name in external),
        ]
        described = await admin.describe_topics([s.name for s in specs])
    finally:
        await admin.close()
    found = {d["topic"]: len(d["partitions"]) for d in described if not d.get("error_code")}
    problems = []
    missing_only = True
    for spec in specs:
        actual = found.get(spec.name)
        if actual is None and spec.name in external:
            problems.append(
                f"{spec.name}: missing; it is Debezium's, created by Kafka Connect "
                "(deploy/local/connect.sh start), or check SAGALINE_CDC_TOPIC_PREFIX"
            )
        elif actual is None:
            problems.append(f"{spec.name}: missing (run `sagaline topics create`)")
        elif actual != spec.partitions:
            missing_only = False
            problems.append(
                f"{spec.name}: {actual} partitions, declared {spec.partitions}; keyed state "
                "would move to other partitions, so the worker will not start"
            )
    return problems, missing_only


async def topic_partitions(
    consumer: AIOKafkaConsumer, topic: str, wait_s: float = 10.0
) -> list[TopicPartition]:
    """The topic's partitions, or none when it does not exist.

    aiokafka >= 0.12 no longer fetches every topic's metadata when a consumer starts (and its
    public ``topics()`` refreshes a copy, not the consumer's own view), and a topic created a
    moment ago has no partition leaders yet: refresh the consumer's metadata until the
    partitions show, for at most ``wait_s``."""
    deadline = asyncio.get_running_loop().time() + wait_s
    partitions = consumer.partitions_for_topic(topic)
    while not partitions:
        await consumer._client.force_metadata_update()
        partitions = consumer.partitions_for_topic(topic)
        if partitions or asyncio.get_running_loop().time() >= deadline:
            break
        await asyncio.sleep(0.2)
    return [TopicPartition(topic, p) for p in sorted(partitions or ())]
