"""Keep the read side declarative: `make lint` fails on a dispatch by entity type or on an
import of one particular model's fold outside its declaration.

What it looks for, in every Python file of the packages and the tests:

- a comparison of something named ``entity_type`` with a literal or a constant, or of
  another expression that holds an entity type (a key's prefix, ``key.split(":")[0]``; a
  ``saga_type``) with the name of a declared entity type or read model: the component
  should ask :mod:`sagas.catalog` which model folds that type instead. Any other expression
  may equal such a string (``kind == "transfer"`` is no dispatch on the transfer model);
- in the read side (``readside/``, ``spark_projections/``), a comparison with a message
  type's ``TYPE`` (``F.col("type") == OrderPlaced.TYPE``): what a model reads of which
  event is in its declaration;
- ``from <module> import <fold>`` of a declared model's fold (``apply_order``...) outside
  the module that declares it: components reach a fold through ``model.fold``.

Unit tests of a fold itself (``tests/unit``) may import it. Usage:
``python -m scripts.check_declarations [paths...]`` (default: the repository); exit 1 and
one line per finding when there is one.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sagas.catalog import READ_MODELS

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("sagas", "runtime", "readside", "services", "spark_projections", "sagaline", "faults")
SCANNED_TESTS = ("tests/integration", "tests/spark")
DECLARED_NAMES = frozenset(m.entity_type for m in READ_MODELS) | frozenset(
    m.name for m in READ_MODELS
)
FOLDS = {
    name: m.row_type.__module__
    for m in READ_MODELS
    for name, value in vars(sys.modules[m.row_type.__module__]).items()
    if value is m.fold
}
"""A declared model's fold, by the name its declaring module binds it to (the fold is
derived from the declaration: ``apply_stock = PRODUCT_STOCK.fold``)."""


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _is_entity_type(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "entity_type") or (
        isinstance(node, ast.Attribute) and node.attr == "entity_type"
    )


_HOLDS_ENTITY_TYPE = frozenset({"entity_type", "saga_type"})


def _holds_entity_type(node: ast.expr) -> bool:
    """``entity_type``, ``saga_type`` (a name, an attribute or a string-keyed item), or a
    key's prefix: ``<key>.split(":")[0]``, ``<key>.partition(":")[0]``."""
    if isinstance(node, ast.Name):
        return node.id in _HOLDS_ENTITY_TYPE
    if isinstance(node, ast.Attribute):
        return node.attr in _HOLDS_ENTITY_TYPE
    if not isinstance(node, ast.Subscript):
        return False
    item = node.slice
    if isinstance(item, ast.Constant) and item.value in _HOLDS_ENTITY_TYPE:
        return True
    call = node.value
    return (
        isinstance(item, ast.Constant)
        and item.value == 0
        and isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in ("split", "partition")
        and bool(call.args)
        and isinstance(call.args[0], ast.Constant)
        and call.args[0].value == ":"
    )


def _literals(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Tuple | ast.List | ast.Set):
        for element in node.elts:
            yield from _literals(element)


def _module_of(path: Path) -> str:
    relative = path.resolve().relative_to(ROOT).with_suffix("")
    return ".".join(relative.parts)


def _is_constant_name(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return isinstance(node, ast.Name | ast.Attribute) and name.isupper() and name != "TYPE"


def _is_message_type(node: ast.expr) -> bool:
    """``OrderPlaced.TYPE``, ``orders.OrderPlaced.TYPE``: one named class (a loop over the
    registered types, ``model.TYPE``, is generic and passes)."""
    if not (isinstance(node, ast.Attribute) and node.attr == "TYPE"):
        return False
    owner = node.value
    name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
    return name[:1].isupper()


def findings_in(path: Path, source: str, module: str | None = None) -> list[Finding]:
    read_side = (module or "").startswith(("readside", "spark_projections"))
    tree = ast.parse(source, filename=str(path))
    # A test asserting what a route answered ("saga_type" == "order") dispatches on nothing.
    asserted = {id(n) for a in ast.walk(tree) if isinstance(a, ast.Assert) for n in ast.walk(a)}
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and id(node) not in asserted:
            sides = [node.left, *node.comparators]
            literals = [value for side in sides for value in _literals(side)]
            if any(_is_entity_type(side) for side in sides) and (
                literals or any(_is_constant_name(side) for side in sides)
            ):
                found.append(Finding(path, node.lineno, "entity_type compared with a constant"))
            elif any(_holds_entity_type(side) for side in sides) and (
                named := sorted(set(literals) & DECLARED_NAMES)
            ):
                found.append(Finding(path, node.lineno, f"dispatch on declared name(s) {named}"))
            elif read_side and any(_is_message_type(side) for side in sides):
                found.append(Finding(path, node.lineno, "dispatch on a message type's TYPE"))
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                home = FOLDS.get(alias.name)
                if home is not None and home == node.module and module != home:
                    found.append(
                        Finding(path, node.lineno, f"imports the fold {alias.name} of {home}")
                    )
    return found


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(path.rglob("*.py"))
        elif path.suffix == ".py":
            yield path


def check(paths: Iterable[Path]) -> list[Finding]:
    found: list[Finding] = []
    for path in _files(paths):
        found += findings_in(path, path.read_text(), _module_of(path))
    return found


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [ROOT / p for p in (*SCANNED, *SCANNED_TESTS)]
    found = check(paths)
    for finding in found:
        print(finding)
    if found:
        print(
            f"{len(found)} finding(s): ask sagas.catalog (model_for, saga_type) and use "
            "model.fold instead (see the README, 'Adding a saga and its read models')"
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
