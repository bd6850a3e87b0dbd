"""Write the REST API's OpenAPI document (what ``/openapi.json`` serves) to a file, for
Spectral (``make lint``: deploy/local/spectral.sh lint, with the ruleset .spectral.yaml).

The document is that of the default settings (API keys on: every keyed route declares the
bearer scheme). It is not committed: the app builds it from the routes, so it cannot drift.

    .venv/bin/python -m scripts.export_openapi [FILE]   (default .local/openapi.json)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from runtime.settings import Settings
from services.api.app import create_api

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / ".local" / "openapi.json"


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    app = create_api(Settings(), bus=object())  # type: ignore[arg-type]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(app.openapi(), indent=2) + "\n")
    print(out)


if __name__ == "__main__":
    main()
