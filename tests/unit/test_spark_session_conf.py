"""The rebuild's Spark configuration: Sagaline's own, then its settings', then
SAGALINE_SPARK_CONF's, which may not override a setting or what the job's results rest on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from runtime.settings import Settings
from spark_projections.session import session_conf

pytestmark = pytest.mark.unit

JARS = [Path("/jars/a.jar"), Path("/jars/b.jar")]


def conf(submitted: bool = False, **settings: object) -> dict[str, str]:
    return session_conf(Settings(**settings), JARS, submitted=submitted)  # type: ignore[arg-type]


def test_the_settings_give_master_memory_jars_and_jvm_options() -> None:
    got = conf(spark_master="local[3]", spark_driver_memory="3g", spark_shuffle_partitions=5)
    assert got["spark.master"] == "local[3]"
    assert got["spark.driver.memory"] == "3g"
    assert got["spark.sql.shuffle.partitions"] == "5"
    assert got["spark.jars"] == "/jars/a.jar,/jars/b.jar"
    default_jvm = "-Duser.timezone=UTC -XX:+UseParallelGC"
    assert got["spark.driver.extraJavaOptions"] == default_jvm
    assert got["spark.executor.extraJavaOptions"] == default_jvm
    assert got["spark.sql.ansi.enabled"] == "true"


def test_under_spark_submit_the_jvm_and_master_are_left_to_it() -> None:
    got = conf(submitted=True)
    assert not {"spark.master", "spark.jars", "spark.driver.memory"} & got.keys()
    assert "spark.driver.extraJavaOptions" not in got
    assert got["spark.sql.ansi.enabled"] == "true"  # a cluster's defaults cannot turn it off


def test_more_conf_comes_last() -> None:
    got = conf(spark_conf={"spark.sql.adaptive.enabled": "false", "spark.local.dir": "/scratch"})
    assert got["spark.sql.adaptive.enabled"] == "false"  # Sagaline's own says "true"
    assert got["spark.local.dir"] == "/scratch"


def test_more_conf_read_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGALINE_SPARK_CONF", '{"spark.sql.adaptive.enabled": "false"}')
    assert Settings().spark_conf == {"spark.sql.adaptive.enabled": "false"}


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("spark.master", "spark.master is set by SAGALINE_SPARK_MASTER"),
        ("spark.driver.memory", "is set by SAGALINE_SPARK_DRIVER_MEMORY"),
        ("spark.executor.extraJavaOptions", "is set by SAGALINE_SPARK_JVM_OPTIONS"),
        ("spark.sql.ansi.enabled", "written for ANSI mode"),
        ("spark.sql.session.timeZone", "every time in UTC"),
        ("sql.adaptive.enabled", "'sql.adaptive.enabled' is not a Spark setting"),
    ],
)
def test_more_conf_may_not_override_a_setting_or_what_results_rest_on(key: str, said: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(said)):
        conf(spark_conf={key: "x"})


def test_the_jvm_keeps_utc() -> None:
    with pytest.raises(ValidationError, match=re.escape("must keep -Duser.timezone=UTC")):
        conf(spark_jvm_options="-XX:+UseParallelGC")
    got = conf(spark_jvm_options="-Duser.timezone=UTC -XX:+UseSerialGC")
    assert got["spark.driver.extraJavaOptions"] == "-Duser.timezone=UTC -XX:+UseSerialGC"


def test_json_true_false_and_numbers_are_taken_as_spark_writes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "SAGALINE_SPARK_CONF",
        '{"spark.sql.adaptive.enabled": false, "spark.sql.autoBroadcastJoinThreshold": -1}',
    )
    monkeypatch.setenv("SAGALINE_SPARK_LOG_LEVEL", "error")
    settings = Settings()
    assert settings.spark_conf == {
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.autoBroadcastJoinThreshold": "-1",
    }
    assert settings.spark_log_level == "ERROR"


def test_a_child_process_gets_the_settings_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings.environment() is what the harnesses start workers and rebuilds with."""
    given = Settings(spark_conf={"spark.sql.adaptive.enabled": "false"}, partitions=3)
    for name, value in given.environment().items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert Settings() == given
