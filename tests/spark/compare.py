"""``assertDataFrameEqual`` from PySpark, usable without pandas, and :func:`compare`: a
declared read model's native rows against its fold's.

``pyspark.testing``'s package ``__init__`` imports its pandas helpers and fails without
pandas, but ``pyspark/testing/utils.py`` (where ``assertDataFrameEqual`` lives) only uses
pandas when it is there. Load that module by path when the package import fails.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyspark
from pyspark.sql import SparkSession

from readside import codec
from sagas.projections.declare import ReadModel
from spark_projections import pipeline, twins
from tests.spark.reference import Record, Reference, project


def _load() -> Any:
    try:
        from pyspark.testing import assertDataFrameEqual

        return assertDataFrameEqual
    except ImportError:
        path = Path(pyspark.__file__).parent / "testing" / "utils.py"
        spec = importlib.util.spec_from_file_location("_pyspark_testing_utils", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.assertDataFrameEqual


assertDataFrameEqual = _load()


def compare(
    spark: SparkSession,
    stage: pipeline.Staged,
    records: Sequence[Record],
    model: ReadModel[Any],
    reference: Reference | None = None,
) -> None:
    """``model``'s native rows (its declaration, :func:`spark_projections.twins.rows`)
    against its fold's in stored form (``reference`` when it folded ``model`` already, else
    projected here with only that model): equal, or an AssertionError."""
    if reference is None:
        reference = project(list(records), (model,))
    folded = reference.rows[model.name]
    assert folded, f"the history gives {model.name} no row: it would prove nothing"
    actual = twins.rows(stage.gated, model)
    rows = [codec.row_values(model, r) for r in folded]
    expected = spark.createDataFrame(
        [tuple(r[c] for c in actual.columns) for r in rows], actual.schema
    )
    assertDataFrameEqual(actual, expected)
