"""The Spark rebuild's fetched jars hold no second copy of anything pyspark ships.

``deploy/local/spark.sh fetch`` copies the Kafka source's runtime closure and the JDBC
drivers from Maven Central, to sit beside pyspark's own ``jars/`` on one classpath. Two
versions of one artifact there (``lz4-java`` from ``at.yawk.lz4`` beside pyspark's, once
``org.lz4``; ``scala-parallel-collections`` fetched again) means whichever the class loader
meets first wins, silently: the pom must exclude it. This check runs on every fetch, before
the jars are swapped in, and fails naming each clash and the exclusion to add.

Artifacts are told by name, not group (a library that moved groups is still one library):
Maven names a copied jar ``<artifactId>-<version>[-<classifier>].jar``, and the version is
the longest tail that starts with a digit after a hyphen and holds no underscore (artifact
ids carry the Scala line, ``_2.13``; versions do not). Usage:
``python -m scripts.check_spark_jars FETCHED_DIR [PYSPARK_JARS_DIR]`` (default: the installed
pyspark's); exit 1 and one line per clash when there is one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
USAGE = "usage: python -m scripts.check_spark_jars FETCHED_DIR [PYSPARK_JARS_DIR]"
_VERSION_START = re.compile(r"-(?=[0-9])")


def artifact(jar_name: str) -> str:
    """The artifact id in a Maven-copied jar's file name (the whole stem when no version
    can be told from it)."""
    stem = jar_name.removesuffix(".jar")
    for found in _VERSION_START.finditer(stem):
        if "_" not in stem[found.start() :]:
            return stem[: found.start()]
    return stem


def clashes(fetched: Iterable[str], shipped: Iterable[str]) -> list[str]:
    """One line per fetched jar whose artifact is also another fetched jar's or a shipped
    one's (another version, or the very same file twice)."""
    fetched, shipped = sorted(fetched), sorted(shipped)
    by_artifact: dict[str, list[str]] = {}
    for name in fetched:
        by_artifact.setdefault(artifact(name), []).append(name)
    shipped_by_artifact: dict[str, list[str]] = {}
    for name in shipped:
        shipped_by_artifact.setdefault(artifact(name), []).append(name)
    lines = []
    for name, jars in sorted(by_artifact.items()):
        theirs = shipped_by_artifact.get(name, [])
        if len(jars) > 1 or theirs:
            where = ", ".join([*jars, *(f"pyspark's {j}" for j in theirs)])
            lines.append(f"{name}: {where}")
    return lines


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(USAGE, file=sys.stderr)
        return 2
    fetched = Path(argv[0])
    shipped = Path(argv[1]) if len(argv) > 1 else pyspark_jars()
    if not shipped.is_dir():
        print(f"no pyspark jars in {shipped}", file=sys.stderr)
        return 2
    found = clashes(
        (j.name for j in fetched.glob("*.jar")), (j.name for j in shipped.glob("*.jar"))
    )
    for line in found:
        print(f"two copies of one artifact on the classpath: {line}", file=sys.stderr)
    if found:
        print(
            "exclude them from the Kafka source in deploy/local/spark/pom.xml "
            "(pyspark's own copy stays)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
