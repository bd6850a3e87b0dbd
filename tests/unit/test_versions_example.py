"""The versions example builds each version as a domain would: the settings' values, and
the state type the version declares, so a stored version-3 record reads back as version 3's
state (tests/integration/test_versions.py relies on it on the real broker)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from runtime.settings import Settings
from sagas.catalog import ORDER_SAGA
from sagas.definitions.order_saga import OrderSaga, OrderState
from sagas.machinery.record import Record
from tests.unit.versions_example import OrderSagaV2, OrderSagaV3, OrderStateV3, domain

pytestmark = pytest.mark.unit


def test_each_version_is_built_with_the_settings_and_its_own_state_type() -> None:
    settings = Settings(step_timeout_s=7.0)
    built = domain(OrderSagaV3, OrderSagaV2, OrderSaga).build(settings)
    process = next(p for p in built if p.name == ORDER_SAGA)
    by_version = process.by_version  # type: ignore[attr-defined]
    assert {v: d.state_type for v, d in by_version.items()} == {
        1: OrderState,
        2: OrderState,
        3: OrderStateV3,
    }
    assert {d.step_timeout for d in by_version.values()} == {timedelta(seconds=7)}

    upgraded = OrderStateV3(status="AUTHORIZING", payment_method="hang", wallet="other")
    stored = Record.codec(process.state_type)(state=upgraded, version=3)
    read = Record.codec(process.state_type).decode("o-1", stored.encode(), lambda _: None)
    assert (type(read.state), read.state.wallet) == (OrderStateV3, "other")
