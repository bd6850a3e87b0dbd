"""The transfer saga: hold funds on the source and room on the destination, then commit both;
a refusal (funds short, a closed or unknown account) or a timeout first releases both."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar, get_args

from sagas.domains.transfers import contracts as t
from sagas.machinery.kit import Flow, Saga, SagaState, Step
from sagas.machinery.legs import Leg
from sagas.machinery.process import Context, Decision
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Message


class TransferState(SagaState):
    amount: Decimal = Decimal(0)
    debit: Leg | None = None
    credit: Leg | None = None


@dataclass(frozen=True)
class TransferSaga(Saga[TransferState]):
    STATUSES: ClassVar[SagaStatuses] = SagaStatuses(
        event=t.TransferStatusChanged, statuses=get_args(t.TransferStatus),
        final=t.FINAL_STATUSES, failed=t.FAILED_STATUSES, start=t.TransferRequested,
    )  # fmt: skip
    COMMANDS: ClassVar[tuple[type[Message], ...]] = (t.RequestTransfer,)
    PORTS = {"accounts": t.ACCOUNTS}
    LEGS = {"debit": "accounts", "credit": "accounts"}
    FLOWS = {"transfer": Flow(steps=(
        Step("PENDING", hold=("debit", "credit")),
        Step("COMMITTING", confirm=("debit", "credit"), forward=True),
    ), done="COMPLETED", failed="FAILED")}  # fmt: skip
    KEY: ClassVar[str] = "the transfer id, which is also the saga id"
    name: str = "transfer-saga"
    entity_type: str = "transfer"
    accounts: str = "account"
    step_timeout: timedelta = timedelta(seconds=30)
    state_type: type[TransferState] = TransferState

    def command(
        self, state: TransferState, message: Message, ctx: Context
    ) -> Decision[TransferState]:
        if state.status is not None or not isinstance(message, t.RequestTransfer):
            return Decision(state)  # this transfer id is taken: the first request wins
        source, destination, amount = message.source, message.destination, message.amount
        new = TransferState(amount=amount, debit=Leg(key=source, rid=f"{ctx.key}:debit"),
                            credit=Leg(key=destination, rid=f"{ctx.key}:credit"))  # fmt: skip
        requested = t.TransferRequested(source=source, destination=destination, amount=amount)
        return self.begin(new, "transfer", ctx, message, start=requested)

    def hold(
        self, state: TransferState, field: str, leg: Leg, ctx: Context, cause: Message | None
    ) -> Message:
        command = t.HoldFunds if field == "debit" else t.PrepareCredit
        return command(reservation_id=leg.rid, amount=state.amount)
