"""``assertDataFrameEqual`` from PySpark, usable without pandas.

``pyspark.testing``'s package ``__init__`` imports its pandas helpers and fails without
pandas, but ``pyspark/testing/utils.py`` (where ``assertDataFrameEqual`` lives) only uses
pandas when it is there. Load that module by path when the package import fails.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pyspark


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
