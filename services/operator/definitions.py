"""The saga kit's definitions behind the declared saga types, as the worker builds them:
per saga type, the newest (what new instances start on, what the console draws) and the
one each version's instances run by (what an operator's dry run plans with)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runtime.settings import Settings
from sagas.catalog import SAGA_TYPES
from sagas.domains import DOMAINS
from sagas.machinery.kit import Saga
from sagas.machinery.process import Process
from sagas.machinery.versions import Versions, version_of


@dataclass(frozen=True)
class SagaDefinitions:
    newest: Saga[Any]
    versions: Versions | None = None
    """The channel's versions, when it runs more than one (or declares upgrades)."""

    @property
    def name(self) -> str:
        """The saga's channel, the same for every version."""
        return self.newest.name

    def runs_by(self, version: int) -> Saga[Any] | None:
        """The kit saga an instance started on ``version`` runs by (its own, or the one its
        declared upgrades lead to); None when no definition here runs that version."""
        if self.versions is None:
            return self.newest if version == version_of(self.newest) else None
        found = self.versions.runs_by(version)
        return found if isinstance(found, Saga) else None


def kit_sagas(processes: Iterable[Process[Any]]) -> dict[str, SagaDefinitions]:
    """Saga type (entity type) -> the kit sagas among ``processes`` that run it."""
    types = {s.entity_type for s in SAGA_TYPES}
    found: dict[str, SagaDefinitions] = {}
    for process in processes:
        versions = process if isinstance(process, Versions) else None
        newest = process.newest if isinstance(process, Versions) else process
        if isinstance(newest, Saga) and newest.entity_type in types:
            found[newest.entity_type] = SagaDefinitions(newest, versions)
    return found


def definitions(settings: Settings) -> dict[str, SagaDefinitions]:
    """The definitions the worker runs with ``settings`` (its channels, its timeouts)."""
    return kit_sagas(p for d in DOMAINS for p in d.build(settings))
