"""What each process channel carries and what each definition publishes, as declared
(``ACCEPTS``, ``FACTS``): complete, and enforced on every unit flow by ``helpers.Bus``."""

from datetime import UTC, datetime

import pytest

from runtime.settings import Settings
from sagaline.wiring import build_processes
from sagas.catalog import CHANNELS, LEGACY_TX, ProcessChannel, facts, running_channels
from sagas.contracts import ledger, payment
from sagas.contracts.system import Tick
from sagas.machinery.process import Context
from sagas.messages import Message
from sagas.participants.payment import PaymentGateway
from tests.unit.helpers import Bus, Undeclared, envelope

pytestmark = pytest.mark.unit


def test_every_contract_travels_on_some_topic() -> None:
    carried = {m.TYPE for c in CHANNELS for m in c.accepts} | {f.TYPE for f in facts()}
    assert sorted(set(Message.known_types()) - carried) == []


def test_channel_names_are_unique_and_every_channel_carries_ticks() -> None:
    assert len({c.name for c in CHANNELS}) == len(CHANNELS)
    assert all(Tick in c.accepts for c in CHANNELS)


WITH_CDC = Settings(cdc_enabled=True)


def test_the_wiring_builds_each_channel_s_declared_definition() -> None:
    built = {p.name: type(p) for p in build_processes(WITH_CDC)}
    assert built == {c.name: c.definition for c in CHANNELS}


def test_without_cdc_the_worker_runs_every_channel_but_the_correlator_s() -> None:
    """Their topics would stay empty: a consumer of them costs every fetch for nothing."""
    built = [p.name for p in build_processes(Settings(cdc_enabled=False))]
    assert built == list(running_channels(cdc_enabled=False))
    assert set(built) == {c.name for c in CHANNELS if not c.cdc}
    assert LEGACY_TX not in built
    assert running_channels(cdc_enabled=True) == tuple(c.name for c in CHANNELS)


def test_driving_enrollment_from_cdc_without_cdc_is_refused_with_a_reason() -> None:
    needs = "SAGALINE_CDC_DRIVES_ENROLLMENT needs SAGALINE_CDC_ENABLED"
    with pytest.raises(ValueError, match=needs):
        Settings(cdc_enabled=False, cdc_drives_enrollment=True)


@pytest.mark.parametrize("declared", CHANNELS, ids=lambda c: c.name)
def test_a_type_a_definition_does_not_accept_changes_nothing(declared: ProcessChannel) -> None:
    """So ``ACCEPTS`` misses nothing ``decide`` acts on: any other type is a no-op."""
    process = next(p for p in build_processes(WITH_CDC) if p.name == declared.name)
    state = process.initial("k-1")
    ctx = Context(key="k-1", now=datetime(2024, 1, 1, tzinfo=UTC), cause_id="c-1", saga_id="s-1")
    accepted = {m.TYPE for m in declared.accepts}
    for type_name, model in Message.known_types().items():
        if type_name in accepted:
            continue
        decision = process.decide(state, model.model_construct(), ctx)
        assert (decision.state, decision.send, decision.events) == (state, (), ()), type_name


def test_the_bus_refuses_a_type_the_channel_does_not_declare() -> None:
    bus = Bus.of(PaymentGateway())
    reserve = ledger.Reserve(reservation_id="o-1:p-1", quantity=1, ttl_seconds=60)
    with pytest.raises(Undeclared, match=r"ledger\.Reserve delivered to payment"):
        bus.send("payment", envelope(reserve, key="o-1"))


def test_the_bus_refuses_a_reply_its_target_does_not_declare() -> None:
    """A definition that sent a reply its saga's channel does not declare is caught."""

    bus = Bus.of(PaymentGateway())
    authorize = payment.Authorize(amount=1, method="card")
    # reply_to a channel that does not accept payment replies: the inventory.
    with pytest.raises(Undeclared, match=r"payment\.Authorized to inventory"):
        bus.send("payment", envelope(authorize, key="o-1", saga_id="o-1", reply_to="inventory"))
