"""The envelope and the payload contracts: what survives the wire and what is refused."""

import json
from decimal import Decimal

import pytest

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.machinery.step import step
from sagas.messages import SCHEMA_VERSION, ContractError, Envelope, Message
from sagas.participants.ledger import CapacityLedger

from .helpers import T0, envelope

pytestmark = pytest.mark.unit


def _order() -> oc.PlaceOrder:
    line = oc.OrderLine(product_id="p1", quantity=2, unit_price=Decimal("9.99"))
    return oc.PlaceOrder(customer_id="c1", lines=(line,), payment=oc.PaymentDetails(method="card"))


def _raw(**changes: object) -> bytes:
    """A valid encoded Reserve envelope with some top-level fields changed (None drops one)."""
    data = json.loads(
        envelope(lc.Reserve(reservation_id="r1", quantity=1, ttl_seconds=60), key="p1").encode()
    )
    for name, value in changes.items():
        if value is None:
            data.pop(name)
        else:
            data[name] = value
    return json.dumps(data).encode()


def _decode_error(raw: bytes | str | None) -> str:
    with pytest.raises(ContractError) as exc:
        Envelope.decode(raw)
    return str(exc.value)


# --- round trip ---------------------------------------------------------------------------


def test_an_envelope_survives_encode_and_decode_with_its_payload():
    # given an envelope with every optional field set and a Decimal in the payload
    env = Envelope.wrap(
        _order(),
        message_id="m1",
        key="o-1",
        occurred_at=T0,
        saga_id="o-1",
        causation_id="c0",
        reply_to="order-saga",
        entity_type="order",
        sequence=7,
    )
    # when it goes through the wire format
    back = Envelope.decode(env.encode())
    # then nothing is lost, and the payload validates to the same message
    assert back == env
    assert back.message() == _order()
    assert back.message().total == Decimal("19.98")


def test_unset_optional_fields_are_left_out_of_the_wire_format():
    env = envelope(lc.Confirm(reservation_id="r1"), key="p1")
    assert set(json.loads(env.encode())) == {
        "message_id",
        "type",
        "schema_version",
        "key",
        "occurred_at",
        "payload",
    }
    assert Envelope.decode(env.encode()).saga_id is None


# --- refused records ----------------------------------------------------------------------


def test_no_value_is_refused():
    assert "empty record" in _decode_error(None)


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", ""])
def test_non_json_is_refused(raw):
    assert _decode_error(raw).startswith("not JSON")


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42", b"null"])
def test_json_that_is_not_an_object_is_refused(raw):
    assert _decode_error(raw) == "not a JSON object"


@pytest.mark.parametrize("missing", ["message_id", "key", "type", "occurred_at", "payload"])
def test_a_missing_envelope_field_is_named(missing):
    reason = _decode_error(_raw(**{missing: None}))
    assert reason == f"bad envelope: {missing}: Field required"


def test_an_unexpected_envelope_field_is_named():
    reason = _decode_error(_raw(colour="blue"))
    assert reason.startswith("bad envelope: colour:")


def test_a_newer_schema_version_is_refused():
    reason = _decode_error(_raw(schema_version=SCHEMA_VERSION + 1))
    assert reason == f"schema version {SCHEMA_VERSION + 1} is newer than {SCHEMA_VERSION}"


def test_the_current_schema_version_is_accepted():
    assert Envelope.decode(_raw(schema_version=SCHEMA_VERSION)).schema_version == SCHEMA_VERSION


def test_an_unknown_type_is_refused_when_its_payload_is_read():
    # given a well-formed envelope whose type no contract declares
    env = Envelope.decode(_raw(type="ledger.Teleport"))
    # when its payload is read, then the reason names the type
    with pytest.raises(ContractError, match=r"unknown message type 'ledger.Teleport'"):
        env.message()


def test_step_refuses_an_unknown_type_with_a_contract_error():
    env = Envelope.decode(_raw(type="ledger.Teleport"))
    with pytest.raises(ContractError, match="unknown message type"):
        step(CapacityLedger(name="inventory", entity_type="product"), None, env, T0)


# --- payload validation -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            {"reservation_id": "r1", "quantity": 0, "ttl_seconds": 60},
            "ledger.Reserve: quantity: Input should be greater than 0",
        ),
        ({"quantity": 1, "ttl_seconds": 60}, "ledger.Reserve: reservation_id: Field required"),
        (
            {"reservation_id": "r1", "quantity": 1, "ttl_seconds": 60, "colour": "blue"},
            "ledger.Reserve: colour: Extra inputs are not permitted",
        ),
    ],
)
def test_a_payload_error_names_the_type_and_the_field(payload, expected):
    env = Envelope.decode(_raw(payload=payload))
    with pytest.raises(ContractError) as exc:
        env.message()
    assert str(exc.value) == expected


def test_a_nested_payload_error_gives_the_path_to_the_field():
    payload = _order().model_dump(mode="json")
    payload["lines"][0]["quantity"] = -1
    env = Envelope.decode(_raw(type="order.Place", payload=payload))
    with pytest.raises(ContractError, match=r"order.Place: lines\.0\.quantity: "):
        env.message()


def test_an_order_naming_a_product_twice_is_refused_with_advice():
    payload = _order().model_dump(mode="json")
    payload["lines"] = payload["lines"] * 2
    env = Envelope.decode(_raw(type="order.Place", payload=payload))
    with pytest.raises(ContractError, match="merge the quantities"):
        env.message()


def test_every_registered_type_maps_back_to_its_own_contract():
    known = Message.known_types()
    assert {"ledger.Reserve", "payment.Authorize", "order.Place", "system.Tick"} <= set(known)
    assert all(name == model.TYPE for name, model in known.items())


def test_declaring_a_type_twice_is_an_error():
    with pytest.raises(TypeError, match="declared twice"):

        class Impostor(Message):
            TYPE = "ledger.Reserve"

    assert Message.model_for("ledger.Reserve") is lc.Reserve
