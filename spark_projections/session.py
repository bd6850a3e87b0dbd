"""The SparkSession of the rebuild: local by default, or whatever ``spark-submit`` set up.

Jars come from ``.local/spark/jars`` (``deploy/local/spark.sh fetch``, once, at set-up) and
go on ``spark.jars``; nothing is resolved at run time (no ``spark.jars.packages``).
Under ``spark-submit`` the caller passes them with ``--jars`` and picks the master.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from runtime.settings import SPARK_CONF_GIVEN_BY, Settings

log = logging.getLogger(__name__)

REQUIRED_JARS = (
    "spark-sql-kafka-0-10_",
    "spark-token-provider-kafka-0-10_",
    "kafka-clients-",
    "commons-pool2-",
    "postgresql-",
    "sqlite-jdbc-",
)
REPO_ROOT = Path(__file__).resolve().parent.parent


class MissingJars(RuntimeError):
    """The Kafka source or a JDBC driver is not in the jars directory."""


def local_path(path: Path) -> Path:
    """A relative setting path: under the repository in a source checkout (the settings
    say so), else under the working directory (an installed package, a container)."""
    if path.is_absolute():
        return path
    base = REPO_ROOT if (REPO_ROOT / "pyproject.toml").is_file() else Path.cwd()
    return base / path


def jar_paths(jars_dir: Path) -> list[Path]:
    """The jars the job needs; raises :class:`MissingJars` naming the fix."""
    folder = local_path(jars_dir)
    found = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    missing = [p for p in REQUIRED_JARS if not any(j.name.startswith(p) for j in found)]
    if missing:
        raise MissingJars(
            f"Spark jars missing in {folder} ({', '.join(m + '*.jar' for m in missing)}): "
            "run deploy/local/spark.sh fetch"
        )
    return found


def under_spark_submit() -> bool:
    """True when ``spark-submit`` started this Python (it already owns the JVM)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: Settings, app_name: str = "sagaline-rebuild") -> SparkSession:
    """The session of ``settings`` (its master, memory, jars and JVM options only when no
    ``spark-submit`` started this Python: then the JVM and its master are already set)."""
    submitted = under_spark_submit()
    jars = [] if submitted else jar_paths(settings.spark_jars_dir)
    builder = SparkSession.builder.appName(app_name)
    for key, value in session_conf(settings, jars, submitted=submitted).items():
        builder = builder.config(key, value)
    if not submitted:
        # Python workers (the exact-route triage) must run this interpreter: it has the
        # project installed, a bare `python3` on PATH may not.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        log.info("spark jars: %s", ", ".join(j.name for j in jars))
        _check_pairing(jars)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(settings.spark_log_level)
    return session


def session_conf(settings: Settings, jars: list[Path], *, submitted: bool) -> dict[str, str]:
    """Every Spark setting the session is built with: Sagaline's, those of its settings
    (unless ``submitted``), then SAGALINE_SPARK_CONF's (which the settings checked: it
    overrides none of the others, nor what the job's results rest on)."""
    given = {key: str(getattr(settings, field)) for key, field in SPARK_CONF_GIVEN_BY.items()}
    given["spark.jars"] = ",".join(str(j) for j in jars)
    if submitted:  # spark-submit started the JVM: only what a running session still takes
        given = {"spark.sql.shuffle.partitions": given["spark.sql.shuffle.partitions"]}
    else:
        given["spark.local.dir"] = str(local_path(Path(".local/spark/tmp")))
    conf = _COMMON_CONF | given
    return conf | settings.spark_conf


def _check_pairing(jars: list[Path]) -> None:
    """The Kafka source links against Spark internals: warn when it is not built for
    pyspark's exact version (deploy/local/spark/pom.xml and pyproject.toml pin both)."""
    import pyspark

    kafka = [j.name for j in jars if j.name.startswith("spark-sql-kafka-0-10_")]
    if kafka and not kafka[0].endswith(f"-{pyspark.__version__}.jar"):
        log.warning(
            "%s does not match pyspark %s (run: deploy/local/spark.sh fetch)",
            kafka[0],
            pyspark.__version__,
        )


_COMMON_CONF = {
    # Spark 4's default, set here so a cluster's own defaults cannot turn it off: the
    # job's casts and indexes are total under it (try_cast, try_to_timestamp, get).
    "spark.sql.ansi.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    # Scratch Parquet and shuffle files live for minutes on a local disk: spend no CPU
    # compressing them (the job is CPU-bound; a cluster can set these back).
    "spark.sql.parquet.compression.codec": "uncompressed",
    "spark.shuffle.compress": "false",
    "spark.shuffle.spill.compress": "false",
    # HotSpot never compiles a method over 8,000 bytes of bytecode (its HugeMethodLimit):
    # a whole-stage method above that runs interpreted for the whole job (the timeline's
    # summary, one CASE over every event type, made one of 20 KB: 2-4x the CPU of its
    # table). Spark's documentation advises this value on HotSpot: such a stage falls
    # back to per-operator code, split into methods the JIT does compile.
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # One executor (local mode): no task should wait for a better locality level.
    "spark.locality.wait": "0s",
    # Keep the configured partitions: on a few cores, AQE's coalescing into an odd number
    # of tasks leaves a core idle for the last one.
    "spark.sql.adaptive.coalescePartitions.enabled": "false",
    # One Python worker per core, kept between tasks (the exact-route triage).
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "true",
    # PySpark would record the Python call site of every Column operation in the JVM,
    # for error messages: ~10 gateway round trips per `&` or `==`, about 40,000 for the
    # native checks alone (seconds of driver time with the executors idle).
    "spark.python.sql.dataFrameDebugging.enabled": "false",
}


def stop_jvm(timeout_s: float) -> None:
    """End the JVM pyspark launched for this process (its gateway), waiting up to
    ``timeout_s`` for Spark's shutdown hooks before a SIGKILL. ``session.stop()`` leaves
    that JVM running until Python exits; a process that must end now, or be sure it left no
    child behind, calls this. Under ``spark-submit`` the JVM is not ours: nothing happens."""
    import subprocess

    from pyspark import SparkContext

    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.warning(
            "the Spark JVM (pid %d) ignored SIGTERM for %g s; killing it", proc.pid, timeout_s
        )
        proc.kill()
        proc.wait(5)
