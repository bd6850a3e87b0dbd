"""Every topic Sagaline uses, declared once with its partitions and retention.

``sagaline topics create`` creates them; the worker checks them at start and refuses to run
when a topic is missing or its partition count differs from the declaration, because keyed
state (tables, changelogs) is only correct while a key keeps its partition.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from runtime.kafka_security import aiokafka_options, unreachable
from runtime.settings import Settings
from sagas.catalog import INVENTORY as INVENTORY
from sagas.catalog import ORDER_SAGA as ORDER_SAGA
from sagas.catalog import PAYMENT as PAYMENT
from sagas.catalog import PROCESS_CHANNELS as PROCESS_CHANNELS

# Logical channels: the saga core names its processes' (sagas.catalog); each maps to one topic.
EVENTS = "events"
DEAD_LETTERS = "deadletter"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def declared_topics(settings: Settings) -> list[TopicSpec]:
    n = settings.partitions
    commands = {"cleanup.policy": "delete", "retention.ms": str(settings.command_retention_ms)}
    specs = [TopicSpec(settings.topic(ch), n, commands) for ch in PROCESS_CHANNELS]
    specs.append(
        TopicSpec(
            settings.topic(EVENTS),
            n,
            {"cleanup.policy": "delete", "retention.ms": str(settings.event_retention_ms)},
        )
    )
    specs.append(
        TopicSpec(settings.topic(DEAD_LETTERS), 1, {"retention.ms": str(30 * 24 * 3600 * 1000)})
    )
    # Faust's table changelogs: compacted, one partition per source partition.
    specs.extend(
        TopicSpec(changelog_topic(settings, ch), n, {"cleanup.policy": "compact"})
        for ch in PROCESS_CHANNELS
    )
    if settings.cdc_enabled:
        # The ingest's positions, partitioned like the Debezium topics it reads, so Faust
        # assigns a Debezium partition and its positions to the same worker.
        specs.append(
            TopicSpec(
                changelog_topic(settings, LEGACY_INGEST),
                settings.cdc_topic_partitions,
                {"cleanup.policy": "compact"},
            )
        )
    return specs


LEGACY_TABLES = ("student", "course", "student_course")
"""The legacy school tables Debezium captures (``deploy/local/legacy/school.sql``)."""
LEGACY_INGEST = "legacy-ingest"
"""The worker's Debezium ingest edge: names its agent and its table of read positions."""


def legacy_table_topics(settings: Settings) -> list[str]:
    """Debezium's change topics of the legacy tables: ``<prefix>.<schema>.<table>``."""
    return [f"{settings.cdc_topic_prefix}.school.{table}" for table in LEGACY_TABLES]


def legacy_transaction_topic(settings: Settings) -> str:
    """Debezium's transaction metadata topic (``provide.transaction.metadata=true``)."""
    return f"{settings.cdc_topic_prefix}.transaction"


def external_topics(settings: Settings) -> list[TopicSpec]:
    """Topics Sagaline reads but does not own: Debezium's, created by Kafka Connect (the
    local worker: ``deploy/local/connect.sh start``; or an existing deployment's). Never
    created by ``topics create``; checked at the worker's start when CDC is on, since the
    ingest's positions table is partitioned like them."""
    if not settings.cdc_enabled:
        return []
    names = [*legacy_table_topics(settings), legacy_transaction_topic(settings)]
    return [TopicSpec(name, settings.cdc_topic_partitions) for name in names]


def table_name(channel: str) -> str:
    return f"{channel}-state"


def changelog_topic(settings: Settings, channel: str) -> str:
    return f"{settings.app_id}-{table_name(channel)}-changelog"


class TopicMismatch(RuntimeError):
    """A declared topic is missing or has another partition count than declared."""


async def create_topics(settings: Settings) -> list[str]:
    """Create every declared topic that does not exist yet; returns the names created.
    Raises :class:`TopicMismatch` naming each topic the broker refused to create."""
    admin = await _started_admin(settings)
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in declared_topics(settings) if s.name not in existing]
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
    external = {s.name for s in external_topics(settings)}
    try:
        specs = [*declared_topics(settings), *external_topics(settings)]
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
