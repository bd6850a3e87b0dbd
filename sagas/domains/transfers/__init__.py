"""Money transfers: the transfer saga moves an amount between two accounts, holding funds
on the source and room on the destination before it commits both; transfers and accounts
as read models. Sagaline's third domain, built on the saga kit and the reservation
primitive alone."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from sagas.domains.transfers import contracts
from sagas.domains.transfers.account import Account
from sagas.domains.transfers.models import ACCOUNTS, TRANSFERS
from sagas.domains.transfers.saga import TransferSaga
from sagas.domains.transfers.traffic import TRAFFIC
from sagas.machinery.domain import Domain, ProcessChannel
from sagas.machinery.process import Process
from sagas.projections.declare import SagaType

TRANSFER_SAGA, ACCOUNT = "transfer-saga", "account"


class TransferSettings(Protocol):
    """The settings the transfer domain's processes read."""

    @property
    def step_timeout_s(self) -> float: ...
    @property
    def dedupe_retention_s(self) -> float: ...


def processes(settings: TransferSettings) -> list[Process[Any]]:
    timeout, retention = settings.step_timeout_s, settings.dedupe_retention_s
    return [
        TransferSaga(name=TRANSFER_SAGA, accounts=ACCOUNT, step_timeout=timedelta(seconds=timeout)),
        Account(name=ACCOUNT, retention=timedelta(seconds=retention)),
    ]


DOMAIN = Domain(
    name="transfers",
    contracts=(contracts,),
    channels=(ProcessChannel(TRANSFER_SAGA, TransferSaga), ProcessChannel(ACCOUNT, Account)),
    processes=processes,
    read_models=(TRANSFERS, ACCOUNTS),
    saga_types=(SagaType(entity_type="transfer", statuses=TransferSaga.STATUSES, model=TRANSFERS),),
    api="services.api.transfers",
    demo="sagaline.transfer_demo",
    traffic=TRAFFIC,
)
