"""Versions of the order saga for the tests of versions (unit and integration).

Version 1 is the order saga as it is (it declares no version). Version 2 changes a rule: a
cancel is refused once the payment is being authorized (version 1 takes it until the
capture is asked for). Version 3 changes the state's shape (the payment method becomes a
channel and a method) and declares the upgrade from version 1, so version-1 orders continue
on its rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from sagas.contracts import orders as oc
from sagas.definitions.order_saga import OrderSaga, OrderState
from sagas.domains import orders
from sagas.machinery.domain import Domain, ProcessChannel
from sagas.machinery.process import Context, Decision, Process
from sagas.messages import Message


@dataclass(frozen=True)
class OrderSagaV2(OrderSaga):
    VERSION: ClassVar[int] = 2
    CANCELLABLE: ClassVar[tuple[str, ...]] = ("PENDING",)

    def command(self, state: OrderState, message: Message, ctx: Context) -> Decision[OrderState]:
        if isinstance(message, oc.CancelOrder) and state.status not in (None, *self.CANCELLABLE):
            why = f"order is already {state.status} (version 2: only a PENDING order cancels)"
            assert state.status is not None
            return self.tell(state, oc.CancelRefused(status=state.status, reason=why), ctx)
        return super().command(state, message, ctx)


class OrderStateV3(OrderState):
    wallet: str = ""
    """The payment method's channel: ``card`` for ``card``, else ``other``."""


def upgrade_from_1(state: OrderState) -> OrderStateV3:
    wallet = "card" if state.payment_method == "card" else "other"
    return OrderStateV3(**state.__dict__, wallet=wallet)


@dataclass(frozen=True)
class OrderSagaV3(OrderSagaV2):
    VERSION: ClassVar[int] = 3
    UPGRADES: ClassVar[Mapping[int, Callable[[Any], Any]]] = {1: upgrade_from_1}
    state_type: type[OrderState] = OrderStateV3

    def _placed(self, cmd: oc.PlaceOrder, ctx: Context) -> OrderState:
        return upgrade_from_1(super()._placed(cmd, ctx))


def _built(cls: type[OrderSaga], settings: orders.OrderSettings) -> list[Process[Any]]:
    return [_as(cls, p) if isinstance(p, OrderSaga) else p for p in orders.processes(settings)]


def _as(cls: type[OrderSaga], built: OrderSaga) -> OrderSaga:
    """``built`` (the order saga as the domain builds it from the settings) as ``cls``: the
    values of the fields ``cls`` declares alike (its channels, its timeouts), not of one it
    redeclares (version 3's state type: copied, its records would be read back as version
    1's state, the upgraded fields dropped)."""
    own = {f.name: f.default for f in fields(cls)}
    return cls(
        **{f.name: getattr(built, f.name) for f in fields(built) if own[f.name] == f.default}
    )


def domain(newest: type[OrderSaga], *older: type[OrderSaga]) -> Domain[Any]:
    """The orders domain with ``newest`` on its saga's channel beside ``older``."""
    channels = tuple(
        ProcessChannel(c.name, newest, versions=older) if c.name == orders.ORDER_SAGA else c
        for c in orders.DOMAIN.channels
    )
    return Domain(
        name=orders.DOMAIN.name,
        contracts=orders.DOMAIN.contracts,
        channels=channels,
        processes=lambda settings: _built(newest, settings),
        read_models=orders.DOMAIN.read_models,
        saga_types=orders.DOMAIN.saga_types,
        api=orders.DOMAIN.api,
        demo=orders.DOMAIN.demo,
    )
