"""One local SparkSession for the whole test session (chispa/quinn style), built exactly as
the job builds its own (jars from ``.local/spark/jars``, UTC, small shuffles).

A fresh clone has no jars yet, and a new pyspark pin makes them stale (the connector of
another Spark): the fixture runs the set-up step that fetches them (``deploy/local/spark.sh
fetch``: a no-op when they are current) before it gives up with its message. The job itself
never fetches anything.
"""

from __future__ import annotations

import logging
import subprocess
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from runtime.settings import Settings
from spark_projections.session import REPO_ROOT, MissingJars, build_session
from tests.spark.cluster import Cluster, cluster_up

JARS = Path(".local/spark/jars")


def _ensure_jars() -> None:
    fetch = subprocess.run(
        [str(REPO_ROOT / "deploy/local/spark.sh"), "fetch"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if fetch.returncode != 0:
        pytest.fail(f"deploy/local/spark.sh fetch failed:\n{fetch.stderr}", pytrace=False)


def _keep_pytests_log_format() -> None:
    """PySpark 4 logs a failed query through two loggers of its own class (non-propagating
    ``PySparkLogger``s), whose ``addHandler`` sets its JSON formatter on the handler it is
    given. pytest attaches its capture handlers to every non-propagating logger at each
    test, so once such a logger exists, every later test's ``caplog`` is formatted as JSON,
    exceptions from ``exc_info`` unredacted (services.logsafe cleans ``exc_text``): a unit
    test of the redaction failed after a Spark test had raised. These two loggers add a
    handler as any logger does."""
    from pyspark.logger import PySparkLogger

    for name in ("DataFrameQueryContextLogger", "SQLQueryContextLogger"):
        logger = PySparkLogger.getLogger(name)
        logger.addHandler = types.MethodType(logging.Logger.addHandler, logger)  # type: ignore[method-assign]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    _ensure_jars()
    _keep_pytests_log_format()
    try:
        session = build_session(
            Settings(
                spark_master="local[2]",
                # One session runs every Spark test (hundreds of plans, cached frames). Since
                # the legacy CDC contracts joined the domain events, the payload schema and
                # its native checks are larger, and a late test's planning ran out of a 1 GiB
                # heap once in CI; a single rebuild (SAGALINE_SPARK_DRIVER_MEMORY, 1g) plans
                # each model once.
                spark_driver_memory="2g",
                spark_shuffle_partitions=4,
                spark_jars_dir=JARS,
                spark_conf={},  # the tests' session, whatever the environment adds
                spark_log_level="WARN",
            ),
            app_name="sagaline-spark-tests",
        )
    except MissingJars as exc:
        pytest.fail(str(exc), pytrace=False)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[Cluster]:
    """A Spark standalone master and two workers on this machine (tests/spark/cluster.py)."""
    _ensure_jars()
    yield from cluster_up()
