"""The saga kit's definitions behind the declared saga types, as the worker builds them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from runtime.settings import Settings
from sagas.catalog import SAGA_TYPES
from sagas.domains import DOMAINS
from sagas.machinery.kit import Saga
from sagas.machinery.process import Process


def kit_sagas(processes: Iterable[Process[Any]]) -> dict[str, Saga[Any]]:
    """Saga type (entity type) -> the kit saga among ``processes`` that runs it."""
    types = {s.entity_type for s in SAGA_TYPES}
    return {p.entity_type: p for p in processes if isinstance(p, Saga) and p.entity_type in types}


def definitions(settings: Settings) -> dict[str, Saga[Any]]:
    """The definitions the worker runs with ``settings`` (its channels, its timeouts)."""
    return kit_sagas(p for d in DOMAINS for p in d.build(settings))
