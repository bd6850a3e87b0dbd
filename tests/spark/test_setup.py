"""Set-up the rebuild relies on: its tables come from migration 0002 exactly as declared,
and a missing jar is named with the command that fetches it."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from readside.engine import create_read_engine
from spark_projections import guard, tables
from spark_projections.session import MissingJars, jar_paths
from tests.integration.readside import BACKENDS, fresh_database, read_engine

pytestmark = pytest.mark.spark


@pytest.mark.integration
@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_0002_creates_exactly_the_rebuild_tables(backend: str, tmp_path: Path) -> None:
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
