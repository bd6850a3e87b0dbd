"""A domain declared once: its contracts, process channels, processes, read models, saga
types and the edge modules that serve it (its API routers, its demo story).

Every registry iterates over the domains (``sagas.domains.DOMAINS``): the catalog, the
worker's wiring, the API, the contract export, the Spark rebuild and the tests. Pure: the
edge modules are named as dotted paths, imported by the edge that uses them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Generic, TypeVar

from sagas.contracts.system import Tick
from sagas.machinery.payload_fields import check_payload_fields
from sagas.machinery.process import Process
from sagas.machinery.traffic import Traffic
from sagas.machinery.versions import Versions
from sagas.messages import Message
from sagas.projections.declare import ReadModel, SagaType

P = TypeVar("P", contravariant=True)
"""What a domain's process factory reads from the settings: a Protocol declared beside the
domain, which ``runtime.settings.Settings`` satisfies structurally."""


@dataclass(frozen=True)
class ProcessChannel:
    """A process's channel and the definition that listens on it: its topic carries the
    commands and replies the definition ``ACCEPTS`` (and ``system.Tick``), keyed by its
    ``KEY``; its ``FACTS`` go to the domain-event topic."""

    name: str
    definition: type[Process[Any]]
    cdc: bool = False
    """Fed only by the worker's Debezium ingest edge (through the correlator's stages): the
    worker runs it only with SAGALINE_CDC_ENABLED. Without CDC its topic stays empty, and a
    consumer of its partitions would cost every fetch of the worker's consumer for nothing
    (5-8 points of a core below full load: BENCHMARKS.md, "Issue 11, fifth step")."""
    versions: tuple[type[Any], ...] = ()
    """Older versions of ``definition`` that instances in flight still run by
    (:mod:`sagas.machinery.versions`); ``definition`` is the newest."""

    @property
    def accepts(self) -> tuple[type[Message], ...]:
        every = (self.definition, *self.versions)
        return (*dict.fromkeys(m for d in every for m in d.ACCEPTS), Tick)

    @property
    def facts(self) -> tuple[type[Message], ...]:
        every = (self.definition, *self.versions)
        return tuple(dict.fromkeys(m for d in every for m in d.FACTS))

    @property
    def key(self) -> str:
        return self.definition.KEY


@dataclass(frozen=True)
class Cancellation:
    """How an operator cancels a saga of ``entity_type`` (``services/operator``)."""

    entity_type: str
    command: Callable[[str], Message]
    """The saga's cancel command, with the operator's reason."""
    started_by: Callable[[Any], Message]
    """The command that started the saga, rebuilt from its read-model row (a cancel's dry
    run replays the definition from it)."""


@dataclass(frozen=True)
class Domain(Generic[P]):
    """One business domain. ``processes`` builds one process per channel, named by it.

    ``api`` names the module holding its routers (``services.api.domain_routes`` reads it):
    it exports ``COMMAND_ROUTERS`` (scope "commands") and ``QUERY_ROUTERS`` (scope "read"),
    tuples of FastAPI routers, and ``TAGS``, the OpenAPI tags they use. ``demo`` names the
    module whose ``story`` coroutine ``sagaline demo`` runs (``sagaline.demo``).
    """

    name: str
    contracts: tuple[ModuleType, ...]
    channels: tuple[ProcessChannel, ...]
    processes: Callable[[P], Sequence[Process[Any]]]
    read_models: tuple[ReadModel[Any], ...] = ()
    saga_types: tuple[SagaType, ...] = ()
    api: str | None = None
    demo: str | None = None
    cancellations: tuple[Cancellation, ...] = ()
    """How an operator cancels each of its saga types (a type without one cannot be)."""
    traffic: Traffic | None = None
    """Its sample traffic and invariants, for the Spark/online equality test and the fault
    harness (:mod:`sagas.machinery.traffic`); None: those exercise it with code of their own."""
    two_typed_fields: Mapping[str, str] = field(default_factory=dict, compare=False)
    """Payload field names its events type otherwise than another event does, on purpose,
    each with the reason (:mod:`sagas.machinery.payload_fields`); best left empty."""

    def __post_init__(self) -> None:
        for saga in self.saga_types:
            if saga.model not in self.read_models:
                raise ValueError(
                    f"domain {self.name!r}: saga type {saga.entity_type!r} shows its status in "
                    f"read model {saga.model.name!r}, which the domain does not declare"
                )
        sagas = {s.entity_type for s in self.saga_types}
        for cancel in self.cancellations:
            if cancel.entity_type not in sagas:
                raise ValueError(
                    f"domain {self.name!r} declares how to cancel a {cancel.entity_type!r} "
                    "saga, which is none of its saga types"
                )
        _declared_once((self,))

    def build(self, settings: P) -> list[Process[Any]]:
        """Its processes, one per channel, each named by its channel."""
        built = list(self.processes(settings))
        for process in built:
            channel = next((c for c in self.channels if c.name == process.name), None)
            if channel is None or not isinstance(process, channel.definition):
                raise ValueError(
                    f"domain {self.name!r} built a {type(process).__name__} named "
                    f"{process.name!r}, which none of its channels declares"
                )
        if sorted(p.name for p in built) != sorted(c.name for c in self.channels):
            raise ValueError(
                f"domain {self.name!r} built processes {[p.name for p in built]} for its "
                f"channels {[c.name for c in self.channels]}: one for each"
            )
        versions = {c.name: c.versions for c in self.channels}
        return [Versions.of(p, versions[p.name]) for p in built]

    @property
    def entity_types(self) -> frozenset[str]:
        """The entity types its read models and saga types are about."""
        models = (m.entity_type for m in self.read_models)
        return frozenset((*models, *(s.entity_type for s in self.saga_types)))


def check_domains(
    domains: Sequence[Domain[Any]], processes: Mapping[str, Sequence[Process[Any]]] = {}
) -> None:
    """Refuse two declarations of one domain, channel, read model, saga type or contract
    module, an entity type claimed by two domains (by their declarations, or by the
    ``processes`` built for each domain, by domain name), and a payload field name their
    domain events type two ways (:mod:`sagas.machinery.payload_fields`)."""
    _declared_once(domains, processes)
    check_payload_fields(domains)


def _declared_once(
    domains: Sequence[Domain[Any]], processes: Mapping[str, Sequence[Process[Any]]] = {}
) -> None:
    named: dict[str, Callable[[Domain[Any]], Iterable[str]]] = {
        "domain": lambda d: (d.name,),
        "channel": lambda d: (c.name for c in d.channels),
        "read model": lambda d: (m.name for m in d.read_models),
        "read model of entity type": lambda d: (m.entity_type for m in d.read_models),
        "saga type": lambda d: (s.entity_type for s in d.saga_types),
        "cancellation of saga type": lambda d: (c.entity_type for c in d.cancellations),
        "contract module": lambda d: (m.__name__ for m in d.contracts),
        # One domain's processes may share an entity type (the legacy correlator's stages).
        "entity type": lambda d: (
            d.entity_types | {p.entity_type for p in processes.get(d.name, ())}
        ),
    }
    for what, names in named.items():
        _once(what, [(name, d.name) for d in domains for name in names(d)])


def _once(what: str, claims: list[tuple[str, str]]) -> None:
    for name, times in Counter(name for name, _ in claims).items():
        if times > 1:
            by = sorted({domain for claimed, domain in claims if claimed == name})
            raise ValueError(
                f"{what} {name!r} is declared {times} times (domain {', '.join(by)}): "
                "each is declared once, by one domain"
            )
