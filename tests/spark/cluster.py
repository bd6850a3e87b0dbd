"""A Spark standalone cluster on this machine, and the rebuild submitted to it as a team
submits it to theirs: a master and two workers from pyspark's own distribution
(``deploy/local/spark.sh cluster-up``), the job through ``spark-submit --master spark://...``
(``spark.sh submit``).

The conftest's ``spark_cluster`` fixture starts the cluster itself (CI runs ``make test``
and nothing else starts it) and stops it afterwards, unless it ran already (someone's own,
left running). A cluster that cannot start fails the test with the daemons' log tails; it
never skips it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.settings import Settings
from spark_projections.session import REPO_ROOT
from tests.integration.harness import settings_env

SPARK_SH = REPO_ROOT / "deploy/local/spark.sh"
WORK = REPO_ROOT / ".local/spark/cluster/work"
"""One directory per worker (``worker-N``), holding one directory per application that ran
executors there (their stdout and stderr)."""

SUBMIT_TIMEOUT_S = 900.0

EXECUTOR_CONF = ("--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2")
"""The job's share of the test cluster: one executor per worker (one core each), small."""


@dataclass(frozen=True)
class Cluster:
    url: str

    def applications(self) -> dict[str, set[str]]:
        """Per worker, the applications that ran executors on it."""
        return {
            worker.name: {app.name for app in worker.iterdir() if app.is_dir()}
            for worker in sorted(WORK.glob("worker-*"))
        }

    def logs(self) -> str:
        return _spark_sh("cluster-logs").stdout


def _spark_sh(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SPARK_SH), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def cluster_up() -> Iterator[Cluster]:
    """The cluster for as long as the caller holds it; the conftest's ``spark_cluster``."""
    ran_before = _spark_sh("cluster-status").returncode == 0
    # cluster-up waits up to 120 s for each daemon; the whole start gets a margin over that.
    up = _spark_sh("cluster-up", timeout=600)
    if up.returncode != 0:
        pytest.fail(f"the Spark standalone cluster did not start:\n{up.stderr}", pytrace=False)
    try:
        yield Cluster(url=up.stdout.strip())
    finally:
        if not ran_before:
            _spark_sh("cluster-down")


def submit(cluster: Cluster, settings: Settings, log: Path) -> str:
    """``spark.sh submit`` against ``cluster`` with ``settings`` (as ``SAGALINE_*``
    variables, what the job reads); its output. A failed submit raises with its log's tail
    and the cluster daemons'."""
    with open(log, "w") as out:
        done = subprocess.run(
            [str(SPARK_SH), "submit", "--master", cluster.url, *EXECUTOR_CONF],
            env=settings_env(settings),
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=SUBMIT_TIMEOUT_S,
            check=False,
        )
    output = log.read_text(errors="replace")
    assert done.returncode == 0, (
        f"spark-submit failed ({done.returncode}):\n{output[-4000:]}\n{cluster.logs()}"
    )
    return output
