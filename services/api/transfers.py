"""Money transfers over REST: open and close accounts, request a transfer, read both (the
transfers domain's API module, named by ``sagas.domains.transfers``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from sagas.catalog import saga_type
from sagas.domains.transfers import ACCOUNT, TRANSFER_SAGA
from sagas.domains.transfers import contracts as t
from sagas.domains.transfers.models import ACCOUNTS, TRANSFERS, AccountRow, TransferRow
from sagas.ids import external_command_id
from services.api.body import StrictJsonRoute
from services.api.commands import Accepted, accepted, dispatch
from services.api.deps import BusDep, IdempotencyKey, claim
from services.api.errors import documented
from services.api.queries import ERRORS, EngineDep, ReadAfterDep, WatchDep, row_or_404
from services.api.requests import ENTITY_ID, Price

AccountId = Annotated[str, Field(min_length=1, max_length=64, pattern=ENTITY_ID)]


def _money(minimum: dict[str, float], pattern: str, what: str) -> WithJsonSchema:
    number = {"type": "number", **minimum, "maximum": 9999999999.99, "multipleOf": 0.01}
    text = {"type": "string", "pattern": pattern}
    return WithJsonSchema({"anyOf": [number, text], "description": what})


Money = Annotated[
    Price,
    _money({"minimum": 0}, r"^[0-9]{1,10}(\.[0-9]{1,2})?$", "An amount: a number with at most 2 "
           'decimals, or a string ("12.50")'),
]  # fmt: skip
Amount = Annotated[
    Price,
    Field(gt=0),
    _money({"exclusiveMinimum": 0}, r"^(?:(?=[0-9]{1,10}(?:\.|$))0*[1-9][0-9]*(?:\.[0-9]{1,2})?"
           r"|0{1,10}\.(?:0[1-9]|[1-9][0-9]?))$", 'An amount above 0: a number with at most 2 '
           'decimals, or a string ("12.50")'),
]  # fmt: skip
"""The schema says what the validation does: a price's rules (services/api/requests.py),
above zero."""
AccountPath = Annotated[str, Path(min_length=1, max_length=64, pattern=ENTITY_ID)]
TransferPath = Annotated[str, Path(min_length=1, max_length=200, pattern=ENTITY_ID)]
TRANSFER = saga_type(TRANSFERS.entity_type)


class TransferRequest(BaseModel):
    """The body of POST /transfers."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"source": "a-1", "destination": "a-2", "amount": "25.00"}]
        },
    )
    source: AccountId
    destination: AccountId
    amount: Amount

    @model_validator(mode="after")
    def _two_accounts(self) -> TransferRequest:
        if self.source == self.destination:
            raise ValueError("source and destination must be two accounts")
        return self


class OpenRequest(BaseModel):
    """The body of PUT /accounts/{account_id}: its opening balance."""

    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"balance": "100.00"}]}
    )
    balance: Money


class TransferAccepted(Accepted):
    transfer_id: str
    status: Literal["PENDING"] = "PENDING"


class AccountAccepted(Accepted):
    account_id: str
    status: Literal["ACCEPTED"] = "ACCEPTED"


commands = APIRouter(tags=["transfers"], route_class=StrictJsonRoute)
reads = APIRouter(tags=["transfers"], route_class=StrictJsonRoute)
ERRORS_IN = documented(400, 404, 415, 503, s404="No route matches (an id with a '/')")


@commands.post(
    "/transfers",
    status_code=202,
    response_model=TransferAccepted,
    responses=ERRORS_IN,
    openapi_extra={"x-rules": ["source and destination must be two accounts (else 422)"]},
)
async def request_transfer(
    request: Request, body: TransferRequest, bus: BusDep, idempotency_key: IdempotencyKey = None
) -> Response:
    """Move an amount between two open accounts: its saga holds the funds on the source and
    room on the destination, then commits both, or releases them and ends FAILED with the
    reason (funds short, an account closed or unknown, a timeout)."""
    transfer_id = claim(request, "transfer", idempotency_key, body).entity()
    message_id = external_command_id(transfer_id, "request")
    command = t.RequestTransfer(
        source=body.source, destination=body.destination, amount=body.amount
    )
    await dispatch(
        bus, TRANSFER_SAGA, command, key=transfer_id, saga_id=transfer_id, message_id=message_id
    )
    return accepted(TransferAccepted, transfer_id=transfer_id, consistency_token=message_id)


@commands.put(
    "/accounts/{account_id}", status_code=202, response_model=AccountAccepted, responses=ERRORS_IN
)
async def open_account(
    request: Request,
    account_id: AccountPath,
    body: OpenRequest,
    bus: BusDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Open an account with its balance (an open account keeps its balance: only transfers
    move money)."""
    message_id = claim(request, f"open/{account_id}", idempotency_key, body).command()
    await dispatch(
        bus, ACCOUNT, t.OpenAccount(balance=body.balance), key=account_id, message_id=message_id
    )
    return accepted(AccountAccepted, account_id=account_id, consistency_token=message_id)


@commands.post(
    "/accounts/{account_id}/close",
    status_code=202,
    response_model=AccountAccepted,
    responses=ERRORS_IN,
)
async def close_account(
    request: Request, account_id: AccountPath, bus: BusDep, idempotency_key: IdempotencyKey = None
) -> Response:
    """Close an account: what it holds settles; it takes no new transfer."""
    message_id = claim(request, f"close/{account_id}", idempotency_key, None).command()
    await dispatch(bus, ACCOUNT, t.CloseAccount(), key=account_id, message_id=message_id)
    return accepted(AccountAccepted, account_id=account_id, consistency_token=message_id)


@reads.get("/transfers/{transfer_id}", response_model=TransferRow, responses=ERRORS)
async def get_transfer(
    transfer_id: TransferPath, engine: EngineDep, watch: WatchDep, after: ReadAfterDep
) -> TransferRow:
    """A transfer as projected; with ``?wait=`` it first waits for a final status."""
    await after.applied()
    if after.wait_given:
        await watch.settled(TRANSFER.key(transfer_id), after.remaining())
    return await row_or_404(engine, TRANSFERS, transfer_id, f"transfer {transfer_id!r}")


@reads.get("/accounts/{account_id}", response_model=AccountRow, responses=ERRORS)
async def get_account(
    account_id: AccountPath, engine: EngineDep, after: ReadAfterDep
) -> AccountRow:
    """An account's balance, what it holds for transfers out, and whether it is open."""
    await after.applied()
    return await row_or_404(engine, ACCOUNTS, account_id, f"account {account_id!r}")


COMMAND_ROUTERS = (commands,)
QUERY_ROUTERS = (reads,)
TAGS = ({"name": "transfers", "description": "Accounts, and money moved between them"},)
