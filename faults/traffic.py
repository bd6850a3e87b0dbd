"""Every domain's declared traffic in a fault cycle (``Domain.traffic``): its setup sent
first, its sagas' commands spread over the load window, its invariants read from the event
topic once it has settled. A domain that declares its traffic is exercised under the
faults with no code of its own here.

The commands go straight onto the process topics, the documented Kafka entrance (README,
"Producing commands straight to Kafka"): each with a message id derived from the run and
its place in the traffic, so a send retried through a broker outage is the same command and
the worker drops the copy.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from faults.checks import Violation
from faults.history import History
from runtime.settings import Settings
from sagas.domains import DOMAINS
from sagas.ids import derive_id
from sagas.machinery.domain import Domain
from sagas.machinery.traffic import Send, Traffic
from sagas.messages import Envelope
from services.bus import CommandBus

RETRY_BUDGET_S = 150.0
"""As long as a REST client retries (faults/load.py): a broker outage alone never loses one."""
SAGAS_PER_S = 3.0


@dataclass
class TrafficLoad:
    domain: Domain[Any]
    traffic: Traffic
    name: str
    """This cycle's suffix of every id the traffic makes."""
    rng: random.Random
    stats: Counter[str] = field(default_factory=Counter)

    async def setup(self, bus: CommandBus) -> None:
        for index, command in enumerate(self.traffic.setup(self.name)):
            await self._send(bus, command, f"setup/{index}")

    async def run(self, bus: CommandBus, seconds: float) -> None:
        """The sagas, evenly over ``seconds``."""
        commands = self.traffic.sagas(self.name, self.rng, max(1, int(seconds * SAGAS_PER_S)))
        started = time.monotonic()
        for index, command in enumerate(commands):
            await asyncio.sleep(max(0.0, started + index / SAGAS_PER_S - time.monotonic()))
            await self._send(bus, command, f"saga/{index}")

    def violations(self, history: History) -> list[Violation]:
        """The domain's rules broken by what this run's traffic left on the event topic."""
        keys = [k for t in sorted(self.domain.entity_types) for k in history.entities(t)]
        mine = [e for k in keys if k.endswith(self.name) for e in history.stream(k)]
        if not mine:  # checking nothing would pass: say so
            return [Violation("invariant", self.domain.name, "its traffic left no event")]
        return [Violation("invariant", self.domain.name, m) for m in self.traffic.invariants(mine)]

    async def _send(self, bus: CommandBus, command: Send, place: str) -> None:
        saga_id = command.key if command.saga else None
        envelope = Envelope.wrap(
            command.message,
            message_id=derive_id(self.name, place),
            key=command.key,
            occurred_at=datetime.now(UTC),
            saga_id=saga_id,
        )
        deadline = time.monotonic() + RETRY_BUDGET_S
        while True:
            try:
                await bus.send(command.channel, envelope)
                self.stats[f"{self.domain.name} sent"] += 1
                return
            except Exception:  # a broker outage: the same command again, within the budget
                self.stats[f"{self.domain.name} send retried"] += 1
                if time.monotonic() > deadline:
                    self.stats[f"{self.domain.name} gave up"] += 1
                    return
                await asyncio.sleep(1.0)


def traffic_loads(name: str, rng: random.Random) -> list[TrafficLoad]:
    """One load per domain that declares its traffic."""
    return [TrafficLoad(d, d.traffic, name, rng) for d in DOMAINS if d.traffic is not None]


async def started_bus(settings: Settings) -> CommandBus:
    bus = CommandBus(settings)
    await bus.start()
    return bus
