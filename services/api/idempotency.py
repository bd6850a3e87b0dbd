"""Idempotency-Keys: bound to the calling API key, and refused with a different body.

**Ids.** The ids a command takes (an order's, its consistency token) derive from the
caller's *namespace*, the route and the Idempotency-Key (services.api.commands). The
namespace is a SHA-256 of the caller's whole API key: every API process computes the same
one from the request alone (no shared secret, no store), so a retry gets the same ids in
any process and after any restart; two API keys never share ids, so one client's key
cannot name another's order; and no one without the API key can compute an id from an
Idempotency-Key. The client that holds the key can (:func:`idempotency_namespace`).

**A different body.** The ids do not depend on the body, on purpose: whatever happens,
one key of one caller names one order, so a second placement can never be a second order,
and the worker drops a repeated command by its id (the first body wins). To answer a
changed body with 422 (as Stripe does) the API must remember what the key was first sent
with: each process keeps a bounded memory of fingerprints (a digest of the validated
request as JSON, so spacing, key order and escapes do not count; a price spelled ``1.5``
once and ``"1.50"`` once does, as the command would carry it so). A changed body
that reaches a process which has not seen the key (another of SAGALINE_API_WORKERS, or
after a restart, or once forgotten) is answered 202 with the first request's ids and has
no effect. Always answering 422 would take a store shared by every process, consulted on
every command (the read-model database is a rebuildable projection, not that store).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import HTTPException
from pydantic import BaseModel

from sagas.ids import external_command_id
from services.api.commands import new_entity_id

DIFFERENT_BODY = (
    "this Idempotency-Key was used with a different request body; send the same body to get "
    "the first request's answer, or use a new Idempotency-Key for a new request"
)


def idempotency_namespace(api_key: str) -> str:
    """The namespace of the caller presenting ``api_key``: secret to everyone else."""
    return hashlib.sha256(b"sagaline idempotency\0" + api_key.encode()).hexdigest()[:32]


def scoped_id(namespace: str, route: str, key: str | None) -> str:
    """The id a caller's Idempotency-Key gives on ``route`` (random without a key). A
    client that holds its API key can compute it, e.g. to find the order of a 202 it never
    received: ``scoped_id(idempotency_namespace(api_key), "order", key)``."""
    return new_entity_id(f"{namespace}/{route}", key)


@dataclass(frozen=True)
class Ids:
    """The ids of one command: stable under one caller's Idempotency-Key on one route,
    fresh (random) without one (as services.api.commands derives them)."""

    seed: str

    def entity(self) -> str:
        """The id of what the command creates (an order, an enrollment)."""
        return self.seed

    def command(self) -> str:
        """The id of a command on an entity named by the route."""
        return external_command_id(self.seed, "command")


class Remembered:
    """The fingerprints of the last ``capacity`` Idempotency-Keys this process accepted."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[str, bytes] = OrderedDict()

    def claim(self, namespace: str, route: str, key: str | None, body: BaseModel | None) -> Ids:
        """The ids of this request; 422 when this caller sent ``key`` to ``route`` with
        another body before (and this process still remembers it)."""
        ids = Ids(scoped_id(namespace, route, key))
        if key is None:
            return ids
        printed = fingerprint(body)
        first = self._seen.setdefault(ids.seed, printed)
        if first != printed:
            raise HTTPException(422, DIFFERENT_BODY)
        self._seen.move_to_end(ids.seed)
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return ids


def fingerprint(body: BaseModel | None) -> bytes:
    """A digest of the validated request (its JSON, as the model writes it)."""
    text = b"null" if body is None else body.model_dump_json().encode()
    return hashlib.blake2b(text, digest_size=16).digest()
