"""The ``sagaline`` command with the order saga at another version (tests only):
``python -m tests.integration.versioned_cli v2 worker`` runs the worker with version 2 of
the order saga beside version 1 (tests/unit/versions_example.py)."""

from __future__ import annotations

import sys

import sagaline.wiring as wiring
import sagas.domains as domains
from sagas.definitions.order_saga import OrderSaga
from tests.unit.versions_example import OrderSagaV2, OrderSagaV3, domain

CODE = {
    "v1": None,
    "v2": domain(OrderSagaV2, OrderSaga),
    "v3": domain(OrderSagaV3, OrderSagaV2, OrderSaga),
}


def install(version: str) -> None:
    orders = CODE[version]
    if orders is not None:
        domains.DOMAINS = tuple(orders if d.name == orders.name else d for d in domains.DOMAINS)
        wiring._DOMAINS = domains.DOMAINS  # type: ignore[assignment]


if __name__ == "__main__":
    install(sys.argv.pop(1))
    from sagaline.cli import main

    main()
