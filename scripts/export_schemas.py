"""Write the JSON Schema of the envelope and of every message contract to ``contracts/``.

The export is committed: a contract change shows in review as a schema diff, and
``tests/unit/test_contract_export.py`` fails while the export is stale. Run it after
changing a contract:  .venv/bin/python -m scripts.export_schemas
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from sagas.messages import Envelope, Message

OUT = Path(__file__).resolve().parents[1] / "contracts"


def schemas() -> dict[str, dict[str, Any]]:
    found = {"Envelope": Envelope.model_json_schema()}
    for type_name, model in sorted(Message.known_types().items()):
        schema = model.model_json_schema()
        schema["title"] = type_name
        found[type_name] = schema
    return found


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*.json"):
        old.unlink()
    for name, schema in schemas().items():
        (OUT / f"{name}.json").write_text(render(schema))
    print(f"wrote {len(schemas())} schemas to {OUT}")


if __name__ == "__main__":
    main()
