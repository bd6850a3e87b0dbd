"""The README's "Adding a saga and its read models", executed: its code blocks are written,
as they are, to the files their first lines name in a throwaway copy of the domain package,
the domain is registered as step 5 says, its migration written as step 6 does, and its flows
run on the in-memory bus beside every registered domain's processes. If the recipe goes
stale, this fails.

The domain's contracts would join the process's registry of every contract, so the recipe
runs in a subprocess of its own, which prints what it saw."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Adding a saga and its read models"
BLOCK = re.compile(
    r"^```python\n# file: (?P<path>\S+)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL
)

DRIVER = """
import json, sys
from decimal import Decimal
from pathlib import Path

import sagas.domains as registry
registry.__path__.append(sys.argv[1] + "/sagas/domains")  # the throwaway package
from sagas.domains import preorders
registry.DOMAINS = (*registry.DOMAINS, preorders.DOMAIN)  # step 5: registered

from runtime.settings import Settings
from readside.migrate import revision
from sagaline.schema import DECLARED
from sagas import catalog
from sagas.contracts.ledger import SetCapacity
from sagas.machinery.domain import check_domains
from sagas.domains.preorders.contracts import PlacePreorder
from tests.unit.helpers import Bus, envelope

check_domains(registry.DOMAINS)
bus = Bus.of(*(p for d in registry.DOMAINS for p in d.build(Settings())))
bus.send("inventory", envelope(SetCapacity(on_hand=1), key="p-1"))
for preorder in ("pre-1", "pre-2"):  # one unit in stock: the second cannot be held
    place = PlacePreorder(product_id="p-1", price=Decimal("9.90"))
    bus.send("preorder-saga", envelope(place, key=preorder, saga_id=preorder))
model = catalog.model_for("preorder")
rows = {}
for event in bus.published:
    if event.entity_type == model.entity_type:
        rows[event.key] = model.fold(rows.get(event.key), event)
written = revision("preorders", DECLARED, scripts=Path(sys.argv[2])).path
print(json.dumps({
    "channels": [c.name for c in catalog.CHANNELS],
    "sagas": {k: [bus.state("preorder-saga", k).status, bus.state("preorder-saga", k).reason]
              for k in ("pre-1", "pre-2")},
    "stock": bus.state("inventory", "p-1").on_hand,
    "rows": {k: [r.status, str(r.price)] for k, r in rows.items()},
    "migration": written.read_text() if written else None,
}))
"""


def recipe() -> dict[str, str]:
    """The section's code blocks, by the file each names."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(SECTION)
    section = readme[start : readme.index("\n## ", start + len(SECTION))]
    return {m["path"]: m["code"] for m in BLOCK.finditer(section)}


def test_the_recipe_names_a_whole_domain_package() -> None:
    assert sorted(recipe()) == [
        "sagas/domains/preorders/__init__.py",
        "sagas/domains/preorders/contracts.py",
        "sagas/domains/preorders/models.py",
        "sagas/domains/preorders/saga.py",
    ]


def test_the_recipe_builds_a_domain_that_registers_migrates_and_runs(tmp_path: Path) -> None:
    for path, code in recipe().items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(code)
    scripts = tmp_path / "migrations"
    shutil.copytree(ROOT / "migrations", scripts, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path), str(scripts)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    saw: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert "preorder-saga" in saw["channels"]
    assert saw["sagas"]["pre-1"] == ["CONFIRMED", None]
    assert saw["sagas"]["pre-2"][0] == "FAILED"
    assert saw["sagas"]["pre-2"][1].startswith("insufficient stock")
    assert saw["stock"] == 0  # one unit sold, the failed pre-order's hold given back
    assert saw["rows"] == {
        "preorder:pre-1": ["CONFIRMED", "9.90"],
        "preorder:pre-2": ["FAILED", "9.90"],
    }
    migration = saw["migration"]
    assert migration and '"preorders"' in migration and "create_table" in migration
    assert "drop_table" not in migration.split("def downgrade")[0]
