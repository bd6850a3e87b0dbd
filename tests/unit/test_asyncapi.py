"""The generated AsyncAPI document: valid, complete, and true to what travels."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from jsonschema import Draft7Validator
from pydantic import BaseModel, ConfigDict

import runtime.topics
from runtime.settings import Settings
from runtime.topics import Records, TopicSpec, documented_topics
from sagas.contracts import orders as oc
from sagas.messages import Envelope, Message
from scripts.check_asyncapi import problems
from scripts.export_asyncapi import document, render
from tests.unit.helpers import at, envelope
from tests.unit.test_enrollment_flows import drop, enroll, transfer, world
from tests.unit.test_flow import order, shop

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return document()


def test_the_document_renders_as_json(doc: dict[str, Any]) -> None:
    assert json.loads(render(doc)) == doc


def test_the_document_is_valid_asyncapi_3(doc: dict[str, Any]) -> None:
    assert problems(doc) == []


def _action(d: dict[str, Any]) -> None:
    d["operations"]["order-saga.send"]["action"] = "produce"


def _partitions(d: dict[str, Any]) -> None:
    d["channels"]["events"]["bindings"]["kafka"]["partitions"] = 0


def _dangling(d: dict[str, Any]) -> None:
    del d["components"]["schemas"]["OrderLine"]


def _no_info(d: dict[str, Any]) -> None:
    del d["info"]


def _version(d: dict[str, Any]) -> None:
    d["asyncapi"] = "3.0"


@pytest.mark.parametrize(
    ("break_it", "complaint"),
    [
        (_action, "operations/order-saga.send"),
        (_partitions, "channels/events"),
        (_dangling, "#/components/schemas/OrderLine points at nothing"),
        (_no_info, "'info' is a required property"),
        (_version, "asyncapi"),
    ],
    ids=["unknown-action", "zero-partitions", "dangling-ref", "no-info", "bad-version"],
)
def test_the_validator_rejects_a_broken_document(
    doc: dict[str, Any], break_it: Callable[[dict[str, Any]], None], complaint: str
) -> None:
    broken = copy.deepcopy(doc)
    break_it(broken)
    found = problems(broken)
    assert found, "a broken document passed"
    assert any(complaint in p for p in found), found


def test_every_topic_is_a_channel_with_its_name_and_partitions(doc: dict[str, Any]) -> None:
    specs = documented_topics(Settings.model_construct())
    kafka = {c["address"]: c["bindings"]["kafka"] for c in doc["channels"].values()}
    assert {s.name: s.partitions for s in specs} == {a: k["partitions"] for a, k in kafka.items()}
    assert "sagaline.deadletter-redriven" in kafka
    assert kafka["sagaline.events"]["partitions"] == Settings.model_construct().partitions


def test_every_contract_is_on_some_channel_and_no_defs_are_left(doc: dict[str, Any]) -> None:
    carried = {m for c in doc["channels"].values() for m in c["messages"]}
    assert set(Message.known_types()) <= carried
    assert "$defs" not in json.dumps(doc)


def test_a_topic_declared_elsewhere_appears_without_a_generator_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """How the CDC topics arrive: an external topic's declaration is all it takes."""

    class Part(BaseModel):
        id: str

    class Change(BaseModel):
        """A row change, as another system writes it."""

        model_config = ConfigDict(title="RowChange")
        before: Part | None
        after: Part | None

    external = TopicSpec(
        "legacy.school.student",
        1,
        records=Records("Rows of a legacy table", key="the row's primary key", body=Change),
    )
    monkeypatch.setattr(runtime.topics, "external_topics", lambda settings: [external])
    doc = document()
    channel = doc["channels"]["legacy.school.student"]
    assert channel["messages"]["RowChange"]["payload"] == {"$ref": "#/components/schemas/RowChange"}
    assert doc["components"]["schemas"]["Part"]["properties"]["id"]["type"] == "string"
    assert problems(doc) == []


def _payload_validator(doc: dict[str, Any], channel: str, type_name: str) -> Draft7Validator:
    """A validator of one message's record value, references resolved within ``doc``."""
    pointer = f"#/channels/{channel}/messages/{type_name}/payload"
    return Draft7Validator({"$ref": pointer, **doc})


def _records_of_real_flows() -> list[tuple[str, Envelope]]:
    """Every record the unit flows put on a topic: orders confirmed, declined and timed out;
    enrollments waitlisted, promoted, transferred and dropped."""
    shop_bus = shop(p1=5, p2=1)
    order(shop_bus, "o-1", p1=2)
    order(shop_bus, "o-2", method="decline", p1=1)
    order(shop_bus, "o-3", p2=3)
    shop_bus.send("order-saga", envelope(oc.CancelOrder(), key="o-1", saga_id="o-1"))
    school = world({"c-1": (1, 3), "c-2": (2, 3)}, {"s-1": 10, "s-2": 10})
    enroll(school, "e-1", "s-1", "c-1")
    enroll(school, "e-2", "s-2", "c-1")
    drop(school, "e-1", at(1))
    transfer(school, "e-2", "c-2")
    found: list[tuple[str, Envelope]] = []
    for bus in (shop_bus, school):
        bus.tick(at(3600))
        found.extend(bus.delivered)
        found.extend(("events", e) for e in bus.published)
    return found


def test_every_record_the_flows_send_matches_its_channel_s_message(doc: dict[str, Any]) -> None:
    records = _records_of_real_flows()
    assert len({(c, e.type) for c, e in records}) > 40  # the flows cover much of the document
    for channel, env in records:
        value = json.loads(env.encode())
        errors = list(_payload_validator(doc, channel, env.type).iter_errors(value))
        assert errors == [], (channel, env.type, [e.message for e in errors])


def test_a_record_of_another_type_or_with_a_stray_field_does_not_match(
    doc: dict[str, Any],
) -> None:
    place = oc.PlaceOrder(
        customer_id="c-1",
        lines=(oc.OrderLine(product_id="p-1", quantity=1, unit_price=1),),  # type: ignore[arg-type]
        payment=oc.PaymentDetails(method="card"),
    )
    value = json.loads(envelope(place, key="o-1", saga_id="o-1").encode())
    validator = _payload_validator(doc, "order-saga", "order.Place")
    assert validator.is_valid(value)
    assert not validator.is_valid({**value, "type": "order.Cancel"})
    assert not validator.is_valid({**value, "headers": {}})
    assert not validator.is_valid({**value, "payload": {**value["payload"], "lines": []}})
