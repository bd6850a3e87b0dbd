"""Versions of a definition: every instance runs by the rules of the version that started it.

A definition declares its ``VERSION`` (a definition that declares none is version 1, as
every definition was before versions existed, and so is a record that holds none). Its
channel lists the older versions still importable (``ProcessChannel.versions``), and the
wiring builds them beside the newest into one :class:`Versions`. ``step()`` then decides
each message by the version in the key's record (:func:`pinned`); a new key starts on the
newest. A newer version may declare an upgrade from an older one (``UPGRADES``: old version
-> a function of the old state giving its own): an instance of that older version then
continues on the newer rules from its next message, its state upgraded once. A record of a
version no longer listed cannot be decided: its message is refused (dead-lettered), never
decided by rules it did not start under.

An older version costs its module, its tests and a line in its channel until its last
instance finishes (``sagaline versions`` says how many are in flight, by version).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Annotated, Any, ClassVar, cast

from pydantic import BaseModel, ValidationInfo, WrapValidator

from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Context, Decision, Process
from sagas.machinery.record import Record
from sagas.machinery.retirement import final_of
from sagas.messages import Message

FIRST = 1
"""The version of a definition that declares none, and of a record that holds none."""


class VersionGone(LookupError):
    """A record started on a version no longer listed beside its channel."""


def version_of(definition: Any) -> int:
    version = getattr(definition, "VERSION", FIRST)
    return version if isinstance(version, int) else FIRST


def upgrades_of(definition: Any) -> Mapping[int, Callable[[Any], Any]]:
    return getattr(definition, "UPGRADES", None) or {}


@dataclass(frozen=True, eq=False)
class Versions:
    """One channel's definitions by version: its newest starts every new instance."""

    newest: Process[Any]
    older: tuple[Process[Any], ...] = ()

    ACCEPTS: ClassVar[tuple[type[Message], ...]] = ()
    """Every version's (:meth:`of` declares them on a class of the channel's own)."""
    FACTS: ClassVar[tuple[type[Message], ...]] = ()
    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        numbers = [version_of(d) for d in self.older]
        if len(set(numbers)) < len(numbers) or any(n >= self.version for n in numbers):
            raise ValueError(
                f"{self.name}: versions {sorted(numbers)} beside the newest {self.version}: "
                "each older version once, each below the newest"
            )
        for definition in (self.newest, *self.older):
            for source in upgrades_of(definition):
                if source >= version_of(definition):
                    raise ValueError(
                        f"{self.name}: version {version_of(definition)} declares an upgrade "
                        f"from version {source}, which is not older"
                    )

    @classmethod
    def of(cls, newest: Process[Any], older: tuple[type[Any], ...]) -> Process[Any]:
        """``newest`` beside the ``older`` definition classes, each built with the newest's
        fields it has (its channels, its timeouts). A definition of version 1 with none
        older stays as it is; a later one without its older versions still refuses their
        instances (:class:`VersionGone`) unless it declares their upgrade."""
        if not older and version_of(newest) == FIRST:
            return newest
        built = tuple(_like(o, newest) for o in older)
        every = (type(newest), *older)
        declared = {
            "ACCEPTS": tuple(dict.fromkeys(m for d in every for m in d.ACCEPTS)),
            "FACTS": tuple(dict.fromkeys(m for d in every for m in d.FACTS)),
            "KEY": type(newest).KEY,
        }
        own = type(f"{type(newest).__name__}Versions", (cls,), declared)
        return cast(Process[Any], own(newest, built))

    @property
    def version(self) -> int:
        return version_of(self.newest)

    @cached_property
    def by_version(self) -> dict[int, Process[Any]]:
        return {version_of(d): d for d in (*self.older, self.newest)}

    def pinned(self, record: Record[Any]) -> tuple[Process[Any], Record[Any]]:
        """The definition ``record`` runs by, and the record, upgraded when a newer version
        declares an upgrade from its own (as far as upgrades lead)."""
        version = record.version or FIRST
        while (newer := self._upgrade_from(version)) is not None:
            state = upgrades_of(self.by_version[newer])[version](record.state)
            record = checked_copy(record, {"state": state, "version": newer})
            version = newer
        definition = self.by_version.get(version)
        if definition is None:
            raise VersionGone(
                f"{self.name}: this key started on version {version}, which is no longer "
                f"listed beside version {self.version} (keep it until its instances finish)"
            )
        return definition, record

    def runs_by(self, version: int) -> Process[Any] | None:
        """The definition an instance started on ``version`` runs by, as :meth:`pinned`
        picks it: its own, or the one its declared upgrades lead to (None: gone)."""
        while (newer := self._upgrade_from(version)) is not None:
            version = newer
        return self.by_version.get(version)

    def _upgrade_from(self, version: int) -> int | None:
        return min(
            (v for v, d in self.by_version.items() if version in upgrades_of(d)), default=None
        )

    # --- the Process protocol: the newest's, the state read by each record's version ------

    @property
    def name(self) -> str:
        return self.newest.name

    @property
    def entity_type(self) -> str:
        return self.newest.entity_type

    @cached_property
    def state_type(self) -> Any:
        """A stored state read as the state of its record's version."""
        types = {v: d.state_type for v, d in self.by_version.items()}
        known = tuple(types.values())

        def read(value: Any, handler: Any, info: ValidationInfo) -> BaseModel:
            if isinstance(value, known):
                return cast(BaseModel, value)
            version = (info.data or {}).get("version") or FIRST
            state_type = types.get(version, self.newest.state_type)
            state: BaseModel = state_type.model_validate(value, context=info.context)
            return state

        return Annotated[Any, WrapValidator(read)]

    def initial(self, key: str) -> Any:
        return self.newest.initial(key)

    def decide(self, state: Any, message: Message, ctx: Context) -> Decision[Any]:
        raise TypeError(f"{self.name}: step() decides by the record's version (pinned)")

    def on_deadline(self, state: Any, name: str, ctx: Context) -> Decision[Any]:
        raise TypeError(f"{self.name}: step() decides by the record's version (pinned)")


def _like(older: type[Any], newest: Any) -> Any:
    """``older`` built with the newest's values of the fields both declare alike (same
    default: a channel, a timeout set from the settings); a field the newer version
    redeclared (its state type) keeps the older's own default."""
    theirs = {f.name: f for f in fields(newest)}
    same = {
        f.name: getattr(newest, f.name)
        for f in fields(older)
        if f.name in theirs and theirs[f.name].default == f.default
    }
    return older(**same)


def pinned(process: Process[Any], record: Record[Any]) -> tuple[Process[Any], Record[Any]]:
    """The definition that decides for ``record`` (see the module's docstring)."""
    if isinstance(process, Versions):
        return process.pinned(record)
    return process, record


def in_flight(process: Process[Any], records: Iterable[Record[Any]]) -> Counter[int]:
    """How many of ``records`` (a channel's stored records) are in flight, by the version
    they hold: not retired, and not final by the rules they run on (a definition that
    cannot finish keeps every key in flight). A version is needed while it has instances,
    even when a newer one declares their upgrade: their stored state is read by it."""
    found: Counter[int] = Counter()
    for record in records:
        if record.retired_at is not None:
            continue
        stored = record.version or FIRST
        try:
            definition, record = pinned(process, record)
        except VersionGone:
            definition = None
        is_final = final_of(definition) if definition is not None else None
        if is_final is None or not is_final(record.state):
            found[stored] += 1
    return found


def started_version(process: Process[Any]) -> int | None:
    """The version a new key of ``process`` starts on (None: it is not versioned)."""
    return process.version if isinstance(process, Versions) else None
