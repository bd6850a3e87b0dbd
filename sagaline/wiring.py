"""Build every domain's processes from settings: the one place they are configured."""

from __future__ import annotations

from typing import Any

from runtime.settings import Settings
from sagas.catalog import running_channels
from sagas.domains import DOMAINS
from sagas.machinery.domain import Domain, check_domains
from sagas.machinery.process import Process

_DOMAINS: tuple[Domain[Settings], ...] = DOMAINS
"""mypy checks here that the settings satisfy each domain's settings protocol."""


def build_processes(settings: Settings) -> list[Process[Any]]:
    """Every process the worker runs: the legacy CDC correlator's only with
    SAGALINE_CDC_ENABLED (``sagas.catalog.running_channels``)."""
    running = set(running_channels(settings.cdc_enabled))
    built = {domain.name: domain.build(settings) for domain in _DOMAINS}
    check_domains(_DOMAINS, built)
    return [p for processes in built.values() for p in processes if p.name in running]
