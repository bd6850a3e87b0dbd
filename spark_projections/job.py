"""The rebuild, end to end: fix offsets, read, classify, gate, stage, swap, summarize.

``sagaline rebuild`` calls :func:`run`; ``spark-submit spark_projections/job.py`` (see
``deploy/local/spark.sh submit``) runs :func:`main` with the same settings. Only small
results ever reach the driver (counts, counters); every row goes executor -> JDBC.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from sqlalchemy import Engine, Table

from readside import retention, schema, store
from runtime import tracing
from runtime.settings import Settings, get_settings
from runtime.topics import EVENTS
from spark_projections import catchup, failures, guard, pipeline, staging, swap, tables
from spark_projections.progress import Emit, Progress, summary_lines
from spark_projections.progress import print_line as _print
from spark_projections.read import Offsets, fix_offsets, read_records
from spark_projections.session import build_session, local_path

log = logging.getLogger(__name__)


STAGING_WRITERS = 3
"""Staging tables written at once (PostgreSQL)."""
RETENTION_BATCH = 10_000
"""Expired sagas deleted per transaction from the staging tables: nothing else reads them,
and on SQLite they have no index, so each batch scans them; few and large."""


class NotMigrated(RuntimeError):
    """The target database lacks the read-model or rebuild tables."""


@dataclass(frozen=True)
class Summary:
    offsets: Offsets
    events_read: int
    verdicts: dict[str, int]
    rows: dict[str, int]
    handover: swap.Handover
    seconds: float

    def lines(self, timings: Mapping[str, float]) -> list[str]:
        h = self.handover
        caught = " ".join(f"{p}:{a}-{b}" for p, (a, b) in h.caught_up.items()) or "none"
        handover = (
            f"caught_up={caught} caught_up_records={h.caught_up_records} "
            f"checkpoints={_pairs(h.checkpoints)} swap_s={h.seconds:.2f} run_id={h.run_id}"
        )
        return summary_lines(
            topic=self.offsets.topic,
            offsets=self.offsets.describe(),
            events_read=self.events_read,
            verdicts=self.verdicts,
            rows=self.rows,
            handover=handover,
            timings=timings,
            total_s=self.seconds,
        )


def run(
    settings: Settings,
    *,
    until_checkpoints: bool = False,
    emit: Emit | None = None,
    spark: SparkSession | None = None,
) -> Summary:
    """Rebuild into ``settings.database_url``. A given ``spark`` session is used and left
    running (tests share one); otherwise the job starts its own and stops it. With
    SAGALINE_TRACING, the run is one span and each stage a child of it."""
    tracer = tracing.configure(settings.tracing, "rebuild")
    topic = {"messaging.system": "kafka", "messaging.destination.name": settings.topic(EVENTS)}
    with tracing.staged(tracer, "rebuild", topic) as on_stage:
        return _run(settings, until_checkpoints, emit, spark, on_stage)


def _run(
    settings: Settings,
    until_checkpoints: bool,
    emit: Emit | None,
    spark: SparkSession | None,
    on_stage: Callable[[str], None],
) -> Summary:
    logging.getLogger("py4j").setLevel(logging.WARNING)
    progress = Progress(
        emit=emit or _print, interval_s=settings.rebuild_progress_s, on_stage=on_stage
    )
    engine = swap.swap_engine(settings.database_url_with_password())
    started_at = datetime.now(UTC)
    try:
        _check_schema(engine)
        with guard.exclusive(engine):
            try:
                summary = _guarded(settings, engine, progress, until_checkpoints, spark)
            except BaseException as exc:  # interrupted too: the run did not swap
                topic = settings.topic(EVENTS)
                failures.record(engine, topic, started_at, progress.stage, exc)
                raise
    finally:
        progress.stop()
        engine.dispose()
    for line in summary.lines(progress.timings):
        progress.emit(line)
    return summary


def _guarded(
    settings: Settings,
    engine: Engine,
    progress: Progress,
    until_checkpoints: bool,
    spark: SparkSession | None,
) -> Summary:
    progress.enter("offsets")
    offsets = asyncio.run(_offsets(settings, engine, until_checkpoints))
    progress.events_to_read = offsets.records
    progress.enter("spark_start", offsets=offsets.describe())
    session = spark or _session(settings)
    progress.heartbeat(session.sparkContext)
    try:
        return _rebuild(session, settings, engine, offsets, progress)
    finally:
        progress.quiet()
        if spark is None:
            session.stop()


@dataclass(frozen=True)
class Built:
    """What the Spark part produced, for the swap and the summary."""

    started_at: datetime
    verdicts: dict[str, int]
    counters: dict[str, int]
    rows: dict[str, int]


def _rebuild(
    spark: SparkSession, settings: Settings, engine: Engine, offsets: Offsets, progress: Progress
) -> Summary:
    scratch = _scratch(settings)
    try:
        built = _build(spark, settings, engine, offsets, progress, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        with contextlib.suppress(OSError):  # left when another run still uses it
            scratch.parent.rmdir()
    _pause(settings, progress)
    progress.enter("swap")
    given = swap.SwapInput(
        offsets=offsets,
        counters=built.counters,
        rows=built.rows,
        events_read=progress.events_read or 0,
        started_at=built.started_at,
    )
    handover = swap.swap(engine, given, _fetcher(settings, offsets.topic))
    staging.drop(engine, swap.STAGED)
    events_read = progress.events_read or 0
    return Summary(offsets, events_read, built.verdicts, built.rows, handover, progress.elapsed())


def _build(
    spark: SparkSession,
    settings: Settings,
    engine: Engine,
    offsets: Offsets,
    progress: Progress,
    scratch: Path,
) -> Built:
    """Read, gate and fill every staging table; the live tables are not touched."""
    started_at = datetime.now(UTC)
    progress.enter("read", events_to_read=offsets.records)
    first = _stage_records(spark, settings, offsets, scratch)
    # One small job counts what was read, tells whether any record needs the exact route,
    # and, when none does, tallies the gated events too.
    read = pipeline.tally_of(first)
    progress.read(sum(read.events.values()))
    progress.enter("triage")
    staged = _stage_gated(spark, scratch, first, read.any_untriaged)
    tally = pipeline.tally(staged) if read.any_untriaged else read
    verdicts, counters = tally.count()
    progress.enter("stage")
    since = started_at - timedelta(hours=settings.receipt_retention_h)
    for table in pipeline.unreached(tally):  # created empty, and left so
        progress.wrote(table.name, 0)
    frames = pipeline.frames(staged, since, tally)
    _fill_staging(engine, settings, frames, progress, scratch)
    _retain(engine, settings, started_at, progress)
    rows = {t.name: progress.rows[t.name] for t in swap.STAGED if t.name in progress.rows}
    return Built(started_at, verdicts, counters, rows)


def _stage_records(
    spark: SparkSession, settings: Settings, offsets: Offsets, scratch: Path
) -> DataFrame:
    """Read the topic once and gate it (first pass), to local Parquet, read back."""
    min_partitions = settings.spark_kafka_min_partitions or None
    records = read_records(spark, settings, offsets, min_partitions)
    first = records.transform(pipeline.first_pass)
    _scratch_parquet(first, scratch / "first")
    return spark.read.parquet(str(scratch / "first"))


def _stage_gated(
    spark: SparkSession, scratch: Path, first: DataFrame, any_untriaged: bool
) -> pipeline.Staged:
    """The second pass, only when some records need the exact route; its result to Parquet."""
    stage = pipeline.second_pass(first, any_untriaged)
    if not any_untriaged:
        return stage
    _scratch_parquet(stage.gated, scratch / "gated")
    return replace(stage, gated=spark.read.parquet(str(scratch / "gated")))


def _scratch_parquet(frame: DataFrame, folder: Path) -> None:
    """``frame`` as Parquet files read back within the run: no dictionary encoding (its
    hash lookups per value cost the first pass more than the larger files cost)."""
    frame.write.mode("overwrite").option("parquet.enable.dictionary", "false").parquet(str(folder))


def _fill_staging(
    engine: Engine,
    settings: Settings,
    frames: dict[Table, DataFrame],
    progress: Progress,
    scratch: Path,
) -> None:
    """Write every staged table. On PostgreSQL a few at once: each write also spends time
    planning, and in its COPY, which another write's tasks can use. SQLite has one write
    lock, so one at a time there."""
    url = settings.database_url_with_password()
    to = staging.target(engine, url, settings.rebuild_jdbc_batch_size, scratch)
    staging.recreate(engine, swap.STAGED)

    def fill(table: Table) -> None:
        staging.write(frames[table], to, table)
        progress.wrote(table.name, staging.count(engine, table))

    parallel = STAGING_WRITERS if engine.dialect.name == "postgresql" else 1
    with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="stage") as pool:
        for done in [pool.submit(fill, table) for table in frames]:
            done.result()
    if engine.dialect.name == "postgresql":
        progress.enter("index")
        staging.add_keys(engine, swap.STAGED)


def _retain(engine: Engine, settings: Settings, started_at: datetime, progress: Progress) -> None:
    """The read side's retention on the staging tables, before they are swapped in: the
    rebuild reads the whole topic, expired sagas included, and must not bring them back
    (the projector's own prune would only delete them again, batch by batch)."""
    if not settings.read_retention_s:
        return
    progress.enter("retention")
    cutoff = started_at - timedelta(seconds=settings.read_retention_s)
    staged = retention.named(staging.staging_name)
    retention.prune_sagas(engine, cutoff, RETENTION_BATCH, tables=staged)
    for t in (schema.saga_timeline, schema.entity_positions, *schema.MODEL_TABLES.values()):
        progress.wrote(t.name, staging.count(engine, t))


def _scratch(settings: Settings) -> Path:
    """A scratch directory of this run's own: two rebuilds at once (into two databases, or
    tests beside a benchmark on one checkout) must not read or delete each other's files.
    A run removes its own at the end; a killed run's is removed by a later one a day on."""
    parent = local_path(settings.rebuild_scratch_dir)
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob("run-*"):
        if time.time() - stale.stat().st_mtime > STALE_SCRATCH_S:
            shutil.rmtree(stale, ignore_errors=True)
    folder = parent / f"run-{uuid.uuid4().hex}"
    folder.mkdir()
    return folder


STALE_SCRATCH_S = 24 * 3600.0
"""Longer than any rebuild runs (the 10M-event one: BENCHMARKS.md)."""


async def _offsets(settings: Settings, engine: Engine, until_checkpoints: bool) -> Offsets:
    topic = settings.topic(EVENTS)
    until = None
    if until_checkpoints:
        with engine.connect() as conn:
            until = store.load_checkpoints(conn, topic)
    return await fix_offsets(settings, topic, until)


def _session(settings: Settings) -> SparkSession:
    return build_session(settings)


def _check_schema(engine: Engine) -> None:
    from sqlalchemy import inspect

    present = set(inspect(engine).get_table_names())
    wanted = {t.name for t in (*swap.STAGED, *swap.LOCK_ORDER, tables.rebuild_failures)}
    missing = sorted(wanted - present)
    if missing:
        raise NotMigrated(
            f"tables missing in the read-model database ({', '.join(missing)}): "
            "run `sagaline db upgrade`"
        )


def _pause(settings: Settings, progress: Progress) -> None:
    """Test hook (``SAGALINE_REBUILD_PAUSE_BEFORE_SWAP_S``): a window to kill the job with
    full staging tables and the live models untouched."""
    if settings.rebuild_pause_before_swap_s:
        progress.enter("pause", seconds=settings.rebuild_pause_before_swap_s)
        time.sleep(settings.rebuild_pause_before_swap_s)


def _fetcher(settings: Settings, topic: str) -> swap.Fetch:
    def fetch(wanted: Mapping[int, tuple[int, int]]) -> Sequence[catchup.Record]:
        return asyncio.run(catchup.fetch(settings, topic, wanted))

    return fetch


def _pairs(values: Mapping[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(values.items())) or "none"


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point for ``spark-submit`` and ``python -m spark_projections.job``."""
    parser = argparse.ArgumentParser(description="Rebuild every read model from the event topic")
    parser.add_argument("--database-url", help="target database (default: settings)")
    parser.add_argument(
        "--until-checkpoints",
        action="store_true",
        help="end at the projector's checkpoints instead of the topic's end offsets now",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    settings = get_settings()
    if args.database_url:
        settings = settings.model_copy(update={"database_url": args.database_url})
    run(settings, until_checkpoints=args.until_checkpoints)


if __name__ == "__main__":
    main()
