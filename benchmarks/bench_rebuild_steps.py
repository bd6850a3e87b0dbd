"""Where the rebuild's time goes: each step of its first pass, and each staged table's
transform, run alone into Spark's ``noop`` sink on an existing event topic, with the JVM CPU
seconds each took (from /proc: less sensitive than the wall clock to other work on a
shared box) beside the wall time.

    python -m benchmarks.bench_rebuild_steps --prefix PREFIX [--per-partition 25000]
        [--rounds 2] [--steps kafka,parse,...] [--frames]

The topic is ``PREFIX.events`` (for example one written by ``bench_rebuild``'s producer),
read from its start, at most ``--per-partition`` records per partition. Each step runs
``--rounds`` times: the first run of a plan also pays for Spark's code generation and the
JIT's compiling it (the job pays that once per plan), later rounds show the per-record cost.
``--frames`` also writes the first pass to scratch Parquet (as the job does) and times each
staged table's transform (its JDBC inserts excluded).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/...): make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.common import cpu_seconds, git_rev, machine
from runtime.settings import Settings
from runtime.topics import EVENTS
from spark_projections import limits, parse, pipeline
from spark_projections.read import Offsets, fix_offsets, read_records
from spark_projections.session import build_session


def steps(
    spark: SparkSession, records: Callable[[], DataFrame]
) -> dict[str, Callable[[], DataFrame]]:
    """The first pass cut at each step: what each adds is its time less ``parse``'s."""

    def parsed() -> DataFrame:
        return parse.parsed(records())

    def plus(column: Callable[[], Column]) -> Callable[[], DataFrame]:
        return lambda: parsed().withColumn("x", column())

    def others() -> Column:
        valid_utf8 = F.instr(F.col("text"), "\ufffd") == 0
        return valid_utf8 & parse._domain_event() & parse._record_key_matches()

    return {
        "kafka": records,
        "parse": parsed,
        "skeleton": plus(parse._skeleton_matches),
        "payload": plus(parse._payload_valid),
        "limits": plus(limits.fits),
        "others": plus(others),
        "verdict": lambda: records().transform(parse.with_verdict),
        "first": lambda: records().transform(pipeline.first_pass),
    }


def timed(name: str, run: Callable[[], None]) -> None:
    cpu, wall = jvm_cpu_s(), time.perf_counter()
    run()
    print(
        f"{name:24s} jvm cpu {jvm_cpu_s() - cpu:7.1f} s   wall {time.perf_counter() - wall:7.1f} s",
        flush=True,
    )


def jvm_cpu_s() -> float:
    """User and system CPU seconds of the JVM pyspark started for this process."""
    return cpu_seconds(SparkContext._gateway.proc.pid)  # type: ignore[union-attr]


def run_step(step: Callable[[], DataFrame]) -> None:
    noop(step())


def noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def main(args: argparse.Namespace) -> None:
    settings = Settings(topic_prefix=args.prefix, app_id=args.prefix, log_level="WARNING")
    found = asyncio.run(fix_offsets(settings, settings.topic(EVENTS)))
    ends = {p: min(e, found.start[p] + args.per_partition) for p, e in found.end.items()}
    offsets = Offsets(found.topic, found.start, ends)
    print(f"machine: {machine()}\ncommit: {git_rev()}  records: {offsets.records:,}")
    print(f"load      1-minute load average {os.getloadavg()[0]:.2f} at start")
    spark = build_session(settings, app_name="sagaline-rebuild-steps")
    min_partitions = settings.spark_kafka_min_partitions or None
    chosen = steps(spark, lambda: read_records(spark, settings, offsets, min_partitions))
    names = args.steps.split(",") if args.steps else list(chosen)
    for round_ in range(args.rounds):
        for name in names:
            timed(f"round {round_} {name}", partial(run_step, chosen[name]))
    if args.frames:
        scratch = Path(f".local/bench-steps-{os.getpid()}")
        try:
            timed(
                "first pass to Parquet",
                lambda: chosen["first"]().write.mode("overwrite").parquet(str(scratch)),
            )
            stage = pipeline.second_pass(spark.read.parquet(str(scratch)), any_untriaged=False)
            for table, frame in pipeline.frames(stage, datetime(2000, 1, 1, tzinfo=UTC)).items():
                timed(f"frame {table.name}", partial(noop, frame))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"load      1-minute load average {os.getloadavg()[0]:.2f} at end")
    spark.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prefix", required=True, help="topic prefix of the event topic")
    parser.add_argument("--per-partition", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", default="", help="comma list (default: every step)")
    parser.add_argument("--frames", action="store_true")
    main(parser.parse_args())
