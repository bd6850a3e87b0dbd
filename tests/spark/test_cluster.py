"""The rebuild on a Spark standalone cluster holds exactly local mode's rows.

The mixed history of ``test_equality`` (every outcome, duplicates, out-of-order and late
events, gaps, malformed records, legacy events) goes to an isolated topic. ``sagaline
rebuild``'s job rebuilds it twice into fresh PostgreSQL databases: once in local mode (the
session's shared SparkSession), once submitted with ``spark-submit`` to a master and two
workers (``tests/spark/cluster.py``), its executors in their own JVMs and Python workers,
its scratch Parquet files on storage both reach. Every table must hold the same rows, the
rejects the same records and reasons, and both workers must have run the job's executors.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from runtime.topics import create_topics
from sagas.catalog import READ_MODELS
from spark_projections.job import run
from tests.integration.harness import broker_reachable, isolated_settings
from tests.integration.readside import fresh_database, produce, read_engine, snapshot
from tests.spark.cluster import Cluster, submit
from tests.spark.test_equality import mixed_history, rejects

pytestmark = [pytest.mark.spark, pytest.mark.integration]


async def test_the_rebuild_on_a_standalone_cluster_holds_local_modes_rows(
    tmp_path: Path, spark: SparkSession, spark_cluster: Cluster
) -> None:
    assert broker_reachable(), "no Kafka broker: run deploy/local/kafka.sh start"
    settings = isolated_settings(tmp_path, log_level="WARNING")
    await create_topics(settings)
    ends = await produce(settings, mixed_history())
    with (
        fresh_database("postgresql", tmp_path) as local,
        fresh_database("postgresql", tmp_path) as clustered,
    ):
        local_settings = settings.model_copy(update={"database_url": local})
        await asyncio.to_thread(run, local_settings, emit=lambda _: None, spark=spark)
        before = spark_cluster.applications()
        cluster_settings = settings.model_copy(update={"database_url": clustered})
        output = await asyncio.to_thread(
            submit, spark_cluster, cluster_settings, tmp_path / "submit.log"
        )
        after = spark_cluster.applications()
        with read_engine(local) as a, read_engine(clustered) as b:
            expected, actual = snapshot(a), snapshot(b)
        assert rejects(clustered) == rejects(local)
    # The job ran on the cluster: an application of this run has executors on both workers.
    new = [after[worker] - before.get(worker, set()) for worker in after]
    assert len(new) == 2 and set.intersection(*new), f"executors per worker: {new}"
    assert f"summary events_read={sum(ends.values())} " in output
    for table, rows in expected.items():
        assert actual[table] == rows, table
    for model in READ_MODELS:  # rows that prove something
        assert expected[model.name], f"the history gives {model.name} no row"
