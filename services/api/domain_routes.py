"""Every domain's API routers, found through its declaration (``sagas.domains``).

A domain names the module holding its routers (``Domain.api``); that module exports
``COMMAND_ROUTERS`` (guarded by the "commands" scope) and ``QUERY_ROUTERS`` (the "read"
scope), tuples of routers, and ``TAGS``: the OpenAPI tag (name and description) of each
tag its routers use. The routes about every domain (the saga list, projections,
metrics, health, the console) are the app's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from fastapi import APIRouter

from runtime.edges import edge_module
from sagas.domains import DOMAINS
from sagas.machinery.domain import Domain

EXPORTS = ("COMMAND_ROUTERS", "QUERY_ROUTERS", "TAGS")


@dataclass(frozen=True)
class DomainRouters:
    commands: tuple[APIRouter, ...]
    queries: tuple[APIRouter, ...]
    tags: tuple[dict[str, str], ...]


def domain_routers(domains: Sequence[Domain[Any]] = DOMAINS) -> DomainRouters:
    """The routers of every domain with an API, commands and queries, in domain order; a
    ValueError names the domain and what its API module lacks."""
    found = [_routers_of(d, d.api) for d in domains if d.api is not None]
    return DomainRouters(
        commands=tuple(r for f in found for r in f.commands),
        queries=tuple(r for f in found for r in f.queries),
        tags=tuple(t for f in found for t in f.tags),
    )


def _routers_of(domain: Domain[Any], name: str) -> DomainRouters:
    module = edge_module(domain, name, "API")
    commands, queries = (_routers(domain, module, export) for export in EXPORTS[:2])
    tags = getattr(module, "TAGS", None)
    declared = {t.get("name") for t in tags} if isinstance(tags, tuple) else set()
    used = {str(t) for r in (*commands, *queries) for t in r.tags}
    if not isinstance(tags, tuple) or not used <= declared:
        raise ValueError(
            f"domain {domain.name!r}: its API module {name!r} must export TAGS, a tuple of "
            f"{{'name', 'description'}} for each tag its routers use ({', '.join(sorted(used))})"
        )
    return DomainRouters(commands=commands, queries=queries, tags=tags)


def _routers(domain: Domain[Any], module: ModuleType, export: str) -> tuple[APIRouter, ...]:
    value = getattr(module, export, None)
    if not isinstance(value, tuple) or not all(isinstance(r, APIRouter) for r in value):
        raise ValueError(
            f"domain {domain.name!r}: its API module {module.__name__!r} must export "
            f"{export}, a tuple of APIRouter"
        )
    return value
