"""The definitions a replay runs: the working tree's, or those a named module builds, with
the settings changed by ``--set``; and the baseline that ran (the working tree with the
settings as they are), whose deadlines stand for the recorded ones."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runtime.settings import Settings
from sagas.machinery.process import Process
from sagas.machinery.replay import Candidate
from sagas.machinery.retirement import Retirement


class CandidateError(ValueError):
    """A ``--definitions`` module or a ``--set`` that cannot be used, as a sentence."""


@dataclass(frozen=True)
class Chosen:
    candidates: dict[str, Candidate]
    baselines: dict[str, Candidate] | None
    """None when the candidates are the working tree with unchanged settings."""


def choose(
    settings: Settings,
    build: Any,
    definitions: str | None = None,
    overrides: Mapping[str, str] | None = None,
) -> Chosen:
    """``build``: settings -> the working tree's processes (``sagaline.wiring``)."""
    changed = changed_settings(settings, overrides or {})
    theirs = {p.name: p for p in build(settings)}
    mine = {p.name: p for p in build(changed)}
    if definitions is not None:
        mine.update({p.name: p for p in _module_processes(definitions, changed)})
    if definitions is None and not overrides:
        return Chosen(_stepped(mine, settings), None)
    return Chosen(_stepped(mine, changed), _stepped(theirs, settings))


def changed_settings(settings: Settings, overrides: Mapping[str, str]) -> Settings:
    """``settings`` with each ``name=value`` of ``overrides`` (a value read as JSON when it
    is JSON, else as text), validated as the settings validate."""
    unknown = sorted(set(overrides) - set(type(settings).model_fields))
    if unknown:
        raise CandidateError(f"--set {', '.join(unknown)}: no such setting")
    if not overrides:
        return settings
    values = {**settings.model_dump(), **{k: _value(v) for k, v in overrides.items()}}
    try:
        return type(settings).model_validate(values)
    except ValueError as exc:
        raise CandidateError(f"--set: {exc}") from None


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _module_processes(path: str, settings: Settings) -> list[Process[Any]]:
    try:
        module = importlib.import_module(path)
    except ImportError as exc:
        raise CandidateError(f"--definitions {path}: {exc}") from None
    processes = getattr(module, "processes", None)
    if not callable(processes):
        raise CandidateError(f"--definitions {path}: it has no processes(settings)")
    return list(processes(settings))


def _stepped(processes: Mapping[str, Process[Any]], settings: Settings) -> dict[str, Candidate]:
    """Each process stepped as the worker steps it with ``settings``."""
    retirement = Retirement(
        record=timedelta(seconds=settings.retire_after_s),
        marker=timedelta(seconds=settings.retired_marker_s),
    )
    return {n: Candidate(p, retirement, settings.seen_window) for n, p in processes.items()}
