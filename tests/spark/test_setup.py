"""Set-up the rebuild relies on: its tables come from migrations 0002 and 0004 exactly as
declared, the session runs in ANSI mode, the fetched jars are the connector of pyspark's own
version and no second copy of a jar pyspark ships, a missing jar is named with the command
that fetches it, and a rebuild that fails
(here before Spark starts: its topic does not exist) leaves a row in rebuild_failures, while
one refused because another runs leaves none."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyspark
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sqlalchemy import text

from readside import queries
from readside.engine import create_read_engine
from runtime.settings import Settings
from scripts import check_spark_jars
from spark_projections import guard, job, tables
from spark_projections.read import TopicMissing
from spark_projections.session import MissingJars, jar_paths
from tests.integration.harness import BOOTSTRAP
from tests.integration.readside import BACKENDS, fresh_database, read_engine

pytestmark = pytest.mark.spark


@pytest.mark.integration
@pytest.mark.parametrize("backend", BACKENDS)
def test_migrations_create_exactly_the_rebuild_tables(backend: str, tmp_path: Path) -> None:
    def ours(name: str | None, type_: str, parents: dict[str, str | None]) -> bool:
        if type_ == "schema":
            return True
        table = name if type_ == "table" else parents.get("table_name")
        return table in tables.metadata.tables

    with (
        fresh_database(backend, tmp_path) as url,
        read_engine(url) as engine,
        engine.connect() as conn,
    ):
        options = {"compare_type": True, "include_name": ours}
        context = MigrationContext.configure(conn, opts=options)
        assert compare_metadata(context, tables.metadata) == []


def test_the_session_runs_in_ansi_mode(spark: SparkSession) -> None:
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    times = spark.createDataFrame([("2024-02-30T09:00:00Z",)], "v string")
    with pytest.raises(Exception, match="CAST_INVALID_INPUT"):  # what the job never does
        times.select(F.to_timestamp("v")).collect()
    assert times.select(F.try_to_timestamp(F.col("v"))).collect()[0][0] is None


def test_the_fetched_jars_are_for_pyspark_and_add_no_second_copy_of_its_own() -> None:
    fetched = jar_paths(Path(".local/spark/jars"))
    kafka = [j.name for j in fetched if j.name.startswith("spark-sql-kafka-0-10_2.13-")]
    assert kafka == [f"spark-sql-kafka-0-10_2.13-{pyspark.__version__}.jar"]
    shipped = [j.name for j in check_spark_jars.pyspark_jars().glob("*.jar")]
    assert check_spark_jars.clashes([j.name for j in fetched], shipped) == []


def test_missing_jars_say_how_to_fetch_them(tmp_path: Path) -> None:
    (tmp_path / "kafka-clients-3.4.1.jar").write_bytes(b"")
    with pytest.raises(MissingJars, match=r"run deploy/local/spark.sh fetch") as caught:
        jar_paths(tmp_path)
    assert "spark-sql-kafka-0-10_*.jar" in str(caught.value)
    assert "kafka-clients" not in str(caught.value)


@pytest.mark.integration
@pytest.mark.parametrize("backend", BACKENDS)
def test_only_one_rebuild_runs_against_a_database(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path) as url:
        first, second = create_read_engine(url), create_read_engine(url)
        try:
            with (
                guard.exclusive(first),
                pytest.raises(guard.AlreadyRunning),
                guard.exclusive(second),
            ):
                pass
            with guard.exclusive(second):  # released with the first run
                pass
        finally:
            first.dispose()
            second.dispose()


@pytest.mark.integration
def test_a_failed_rebuild_is_recorded_and_a_refused_one_is_not(tmp_path: Path) -> None:
    settings = Settings(kafka_bootstrap=BOOTSTRAP, topic_prefix=f"nothing{uuid.uuid4().hex[:8]}")
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        settings = settings.model_copy(update={"database_url": url})
        with pytest.raises(TopicMissing, match="does not exist"):
            job.run(settings, emit=lambda line: None)
        with engine.connect() as conn:
            failure = queries.last_rebuild_failure(conn)
            history = queries.rebuild_history(conn)
        assert failure is not None
        assert failure.stage == "offsets"
        assert failure.error.startswith("TopicMissing: topic nothing")
        assert failure.started_at <= failure.failed_at
        assert history.last_result == "failed" and history.swapped is None

        other = create_read_engine(url)
        try:
            with guard.exclusive(other), pytest.raises(guard.AlreadyRunning):
                job.run(settings, emit=lambda line: None)
        finally:
            other.dispose()
        with engine.connect() as conn:
            count = conn.execute(text("SELECT count(*) FROM rebuild_failures")).scalar_one()
        assert count == 1
