"""Every domain's sample traffic (``Domain.traffic``) as events: its setup and sagas sent
through its real processes on the unit tests' in-memory bus, a fifth of the messages held
back and delivered later in another order, the clock passing some step timeouts, as the
worker would publish them. A domain declares the traffic once; this test needs no code for it."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from runtime.settings import Settings
from sagas.domains import DOMAINS
from sagas.machinery.domain import Domain
from sagas.machinery.traffic import Send, Traffic
from sagas.messages import Envelope
from tests.spark.history import T0
from tests.unit.helpers import Bus, envelope


def traffic_history(sagas: int = 150, seed: int = 29) -> list[Envelope]:
    """The events of ``sagas`` sagas of every domain that declares its traffic."""
    return [
        event
        for domain in DOMAINS
        if domain.traffic is not None
        for event in drive(domain, domain.traffic, sagas, random.Random(seed))
    ]


def drive(domain: Domain[Any], traffic: Traffic, sagas: int, rng: random.Random) -> list[Envelope]:
    bus = Bus.of(*domain.build(Settings()))
    now = T0
    run = f"spark{rng.randrange(10**6)}"

    def send(command: Send) -> None:
        saga_id = command.key if command.saga else None
        bus.send(command.channel, envelope(command.message, key=command.key, saga_id=saga_id,
                                           occurred_at=now), now)  # fmt: skip

    for command in traffic.setup(run):
        send(command)
    bus.hold = lambda _: rng.random() < 0.2
    for command in traffic.sagas(run, rng, sagas):
        send(command)
        now += timedelta(seconds=rng.uniform(0.1, 2.0))
        if rng.random() < 0.05:  # some answers come after the step timeout
            now += timedelta(seconds=31)
            bus.tick(now)
        if rng.random() < 0.3:
            bus.release(now, rng)
    bus.hold = None
    for _ in range(4):  # everything delivered, every deadline due fired
        bus.release(now, rng)
        now += timedelta(minutes=10)
        bus.tick(now)
    return list(bus.published)


def traffic_entities() -> tuple[str, ...]:
    """The key prefixes of the entities those domains' read models hold (``transfer:``...)."""
    return tuple(
        f"{model.entity_type}:"
        for domain in DOMAINS
        if domain.traffic is not None
        for model in domain.read_models
    )
