"""A candidate with a deliberate bug, for the replay's tests (``--definitions
tests.unit.replay_bug``): the order saga skips the first compensation of every failure."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from sagas.definitions.order_saga import OrderSaga, OrderState
from sagas.domains import orders
from sagas.machinery.process import Context, Decision, Process


@dataclass(frozen=True)
class ForgetfulOrderSaga(OrderSaga):
    def fail(
        self, state: OrderState, ctx: Context, reason: str, status: str | None = None
    ) -> Decision[OrderState]:
        decision = super().fail(state, ctx, reason, status)
        return replace(decision, send=decision.send[1:])


def processes(settings: orders.OrderSettings) -> list[Process[Any]]:
    return [
        ForgetfulOrderSaga(**{f.name: getattr(p, f.name) for f in fields(p)})
        if isinstance(p, OrderSaga)
        else p
        for p in orders.processes(settings)
    ]
