"""Tables only the rebuild writes (created by migration ``0002_rebuild``).

Kept apart from :mod:`readside.schema` (the projector's tables); the migration
is hand-written to match this metadata, and a test compares the two.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Date,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

rebuild_rejects = Table(
    "rebuild_rejects",
    metadata,
    Column("topic", String(200), primary_key=True),
    Column("partition", Integer, primary_key=True),
    Column("offset", BigInteger, primary_key=True),
    Column("reason", Text, nullable=False),
    Column("raw", Text, comment="The record's value as text (NULL for a record without one)"),
    comment="Records of the event topic the last rebuild could not project, and why",
)

saga_daily_stats = Table(
    "saga_daily_stats",
    metadata,
    Column("day", Date, primary_key=True, comment="UTC day the saga started"),
    Column("saga_type", String(100), primary_key=True),
    Column("outcome", String(20), primary_key=True, comment="Final status, or IN_FLIGHT"),
    Column("count", BigInteger, nullable=False),
    Column("p50_ms", Float, comment="Median start-to-final-state time (NULL for IN_FLIGHT)"),
    Column("p95_ms", Float, comment="95th percentile of that time"),
    comment="Sagas per start day, type and outcome, from the last rebuild",
)

saga_daily_reasons = Table(
    "saga_daily_reasons",
    metadata,
    Column("day", Date, primary_key=True),
    Column("saga_type", String(100), primary_key=True),
    Column("outcome", String(20), primary_key=True),
    Column("reason", String(500), primary_key=True),
    Column("count", BigInteger, nullable=False),
    comment="Why sagas failed, per start day, type and outcome, from the last rebuild",
)

rebuild_runs = Table(
    "rebuild_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("topic", String(200), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("swapped_at", DateTime(timezone=True), nullable=False),
    Column("offsets", Text, nullable=False, comment="JSON: partition -> [start, end)"),
    Column("caught_up", Text, nullable=False, comment="JSON: partition -> [end, checkpoint)"),
    Column("events_read", BigInteger, nullable=False),
    Column("rows", Text, nullable=False, comment="JSON: table -> rows swapped in"),
    comment="Every rebuild that swapped its models in: what it covered",
)

rebuild_failures = Table(
    "rebuild_failures",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("topic", String(200), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("failed_at", DateTime(timezone=True), nullable=False),
    Column("stage", String(40), nullable=False, comment="Where it stopped: offsets, ..."),
    Column("error", Text, nullable=False, comment="The error's type and message"),
    comment="Every rebuild that ended without swapping its models in, and why",
)

REBUILD_TABLES = (rebuild_rejects, saga_daily_stats, saga_daily_reasons)
"""Replaced wholesale by every rebuild, in the same transaction as the read models."""
