"""Validate the committed AsyncAPI document (``make lint``): against the official AsyncAPI
3.0.0 JSON Schema (vendored in ``scripts/vendor/asyncapi/``, so nothing is downloaded), and
every ``#/...`` reference in it must point at something in the document (the schema alone
does not follow references)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry

from scripts.export_asyncapi import document

SPEC = Path(__file__).resolve().parent / "vendor" / "asyncapi" / "asyncapi-3.0.0.schema.json"


def problems(doc: Any) -> list[str]:
    """What is wrong with ``doc`` as an AsyncAPI 3.0.0 document; empty when nothing."""
    spec = json.loads(SPEC.read_text())
    # An empty registry retrieves nothing: the vendored schema bundles every definition
    # under its $id, and without a registry jsonschema would fetch unknown URIs remotely.
    validator = Draft7Validator(spec, registry=Registry())
    found = [
        f"{'/'.join(map(str, error.absolute_path)) or '(document)'}: {error.message[:300]}"
        for error in validator.iter_errors(doc)
    ]
    found.extend(f"{where}: $ref {ref} points at nothing" for where, ref in _dangling(doc, doc))
    return found


def _dangling(doc: Any, node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and not _resolves(doc, ref):
            yield where or "(document)", ref
        for key, value in node.items():
            yield from _dangling(doc, value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _dangling(doc, value, f"{where}/{i}")


def _resolves(doc: Any, ref: str) -> bool:
    node = doc
    for token in ref.removeprefix("#").split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return False
    return True


def main() -> int:
    found = problems(document())
    for problem in found:
        print(f"asyncapi: {problem}", file=sys.stderr)
    if not found:
        print("asyncapi: the generated document is valid AsyncAPI 3.0.0")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
