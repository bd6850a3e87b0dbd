"""One local SparkSession for the whole test session (chispa/quinn style), built exactly as
the job builds its own (jars from ``.local/spark/jars``, UTC, small shuffles).

A fresh clone has no jars yet: the fixture runs the set-up step that fetches them
(``deploy/local/spark.sh fetch``, idempotent) before it gives up with its message. The job
itself never fetches anything.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark_projections.session import REPO_ROOT, MissingJars, build_session, jar_paths

JARS = Path(".local/spark/jars")


def _ensure_jars() -> None:
    try:
        jar_paths(JARS)
    except MissingJars:
        fetch = subprocess.run(
            [str(REPO_ROOT / "deploy/local/spark.sh"), "fetch"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if fetch.returncode != 0:
            pytest.fail(f"deploy/local/spark.sh fetch failed:\n{fetch.stderr}", pytrace=False)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    _ensure_jars()
    try:
        session = build_session(
            master="local[2]",
            # One session runs every Spark test (hundreds of plans, cached frames). Since the
            # legacy CDC contracts joined the domain events, the payload schema and its native
            # checks are larger, and a late test's planning ran out of a 1 GiB heap once in
            # CI; a single rebuild (SAGALINE_SPARK_DRIVER_MEMORY, 1g) plans each model once.
            driver_memory="2g",
            shuffle_partitions=4,
            jars_dir=JARS,
            app_name="sagaline-spark-tests",
        )
    except MissingJars as exc:
        pytest.fail(str(exc), pytrace=False)
    yield session
    session.stop()
