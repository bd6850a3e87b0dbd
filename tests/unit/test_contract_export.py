"""The committed JSON Schema export matches the contracts in code."""

import pytest

from scripts.export_schemas import OUT, render, schemas

pytestmark = pytest.mark.unit


def test_every_contract_schema_is_exported_and_current() -> None:
    current = {f"{name}.json": render(schema) for name, schema in schemas().items()}
    committed = {p.name: p.read_text() for p in OUT.glob("*.json")}
    stale = sorted(
        n for n in current.keys() | committed.keys() if current.get(n) != committed.get(n)
    )
    assert stale == [], f"run `python -m scripts.export_schemas`: {stale}"
