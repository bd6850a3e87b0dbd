"""The edge modules a domain names (its API routers, its demo story), imported by name.

A domain's declaration stays pure by naming them as dotted paths (``Domain.api``,
``Domain.demo``); the edge that serves them imports them here, so a missing module is told
the same way by each: which domain names it, and for what.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from sagas.machinery.domain import Domain


def edge_module(domain: Domain[Any], name: str, role: str) -> ModuleType:
    """The module ``name`` that ``domain`` declares as its ``role`` (``"API"``, ``"demo"``);
    a ValueError when it does not exist. A module that exists and fails an import of its
    own raises that failure as it is."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not name.startswith(exc.name):
            raise
        raise ValueError(
            f"domain {domain.name!r} names {role} module {name!r}, which does not exist"
        ) from exc
