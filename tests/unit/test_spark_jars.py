"""The Spark rebuild's jars: the version stated once (pyproject.toml's pyspark pin, which
``deploy/local/spark.sh`` and the rebuild image read, the pom has none), and the check that
fails a fetch bringing a second copy of an artifact pyspark ships."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from xml.etree import ElementTree

import pyspark
import pytest

from scripts.check_spark_jars import ROOT, artifact, clashes, main, pyspark_jars

pytestmark = pytest.mark.unit

POM = ROOT / "deploy/local/spark/pom.xml"


def _pin() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pin,) = [d for d in project["dependencies"] if d.startswith("pyspark")]
    found = re.fullmatch(r"pyspark==([0-9.]+)", pin)
    assert found, f"pyspark must be pinned exactly (the connector is fetched for it): {pin}"
    return found.group(1)


def test_the_spark_version_is_stated_once_and_is_pysparks() -> None:
    version = subprocess.run(
        [str(ROOT / "deploy/local/spark.sh"), "version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    assert version == _pin() == pyspark.__version__
    pom = POM.read_text()
    assert "<version>${spark.version}</version>" in pom
    values = {(e.text or "").strip() for e in ElementTree.parse(POM).iter()}
    assert "<spark.version>" not in pom and version not in values  # no default to drift
    dockerfile = (ROOT / "deploy/k8s/Dockerfile.rebuild").read_text()
    assert '-Dspark.version="$version"' in dockerfile and "pyproject.toml" in dockerfile


def test_the_pom_is_for_pysparks_scala_line() -> None:
    (library,) = pyspark_jars().glob("scala-library-*.jar")
    scala = ".".join(library.name.removeprefix("scala-library-").split(".")[:2])
    assert f"<scala.binary.version>{scala}</scala.binary.version>" in POM.read_text()


@pytest.mark.parametrize(
    ("jar", "name"),
    [
        ("lz4-java-1.10.1.jar", "lz4-java"),
        ("scala-parallel-collections_2.13-1.2.0.jar", "scala-parallel-collections_2.13"),
        ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
        ("zstd-jni-1.5.7-7.jar", "zstd-jni"),
        ("sqlite-jdbc-3.46.1.3.jar", "sqlite-jdbc"),
        ("jline-3.26.3.jar", "jline"),
        # A classifier with an underscore: no version told, the whole name (never a clash).
        (
            "netty-tcnative-2.0.76.Final-linux-x86_64.jar",
            "netty-tcnative-2.0.76.Final-linux-x86_64",
        ),
    ],
)
def test_a_jars_artifact_is_its_name_without_the_version(jar: str, name: str) -> None:
    assert artifact(jar) == name


def test_a_second_copy_of_an_artifact_is_a_clash() -> None:
    shipped = ["lz4-java-1.11.0.jar", "scala-parallel-collections_2.13-1.2.0.jar", "a-1.0.jar"]
    fetched = [
        "lz4-java-1.10.1.jar",  # another version (kafka-clients' lz4, from another group)
        "scala-parallel-collections_2.13-1.2.0.jar",  # the very same jar again
        "kafka-clients-3.9.2.jar",
        "commons-pool2-2.13.1.jar",
        "b-1.0.jar",
        "b-2.0.jar",  # two versions among the fetched ones
    ]
    assert clashes(fetched, shipped) == [
        "b: b-1.0.jar, b-2.0.jar",
        "lz4-java: lz4-java-1.10.1.jar, pyspark's lz4-java-1.11.0.jar",
        "scala-parallel-collections_2.13: scala-parallel-collections_2.13-1.2.0.jar, "
        "pyspark's scala-parallel-collections_2.13-1.2.0.jar",
    ]
    assert clashes(["kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"], shipped) == []


def test_the_check_fails_a_fetch_with_a_clash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fetched, shipped = tmp_path / "fetched", tmp_path / "pyspark"
    fetched.mkdir()
    shipped.mkdir()
    (shipped / "lz4-java-1.11.0.jar").write_bytes(b"")
    (fetched / "kafka-clients-3.9.2.jar").write_bytes(b"")
    assert main([str(fetched), str(shipped)]) == 0
    (fetched / "lz4-java-1.10.1.jar").write_bytes(b"")
    assert main([str(fetched), str(shipped)]) == 1
    assert "lz4-java: lz4-java-1.10.1.jar, pyspark's lz4-java-1.11.0.jar" in capsys.readouterr().err
