"""Each domain declared once (``sagas.domains``): what it declares is what the catalog, the
wiring, the contract registry, the API and the demo serve, and a declaration that collides
with another, or names an API or demo module that is missing or incomplete, is refused with
a sentence."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterator
from dataclasses import replace
from types import ModuleType
from typing import Any

import pytest
from fastapi import APIRouter
from fastapi.routing import APIRoute

from runtime.settings import Settings
from sagaline.demo import story_of
from sagaline.wiring import build_processes
from sagas import catalog
from sagas.contracts import system
from sagas.domains import DOMAINS
from sagas.domains import orders as order_domain
from sagas.machinery.domain import Domain, ProcessChannel, check_domains
from sagas.messages import Message
from sagas.participants.payment import PaymentGateway
from services.api.app import create_api
from services.api.domain_routes import domain_routers

pytestmark = pytest.mark.unit

ORDERS = order_domain.DOMAIN


def test_the_catalog_lists_every_domain_s_declarations_in_domain_order() -> None:
    assert tuple(c for d in DOMAINS for c in d.channels) == catalog.CHANNELS
    assert tuple(m for d in DOMAINS for m in d.read_models) == catalog.READ_MODELS
    assert tuple(s for d in DOMAINS for s in d.saga_types) == catalog.SAGA_TYPES


def test_every_registered_contract_belongs_to_one_domain_or_to_the_system() -> None:
    owners: dict[str, list[str]] = {}
    for domain in DOMAINS:
        for module in domain.contracts:
            for type_name, model in Message.known_types().items():
                if model.__module__ == module.__name__:
                    owners.setdefault(type_name, []).append(domain.name)
    system_types = {t for t, m in Message.known_types().items() if m.__module__ == system.__name__}
    assert {t: o for t, o in owners.items() if len(o) > 1} == {}
    assert set(Message.known_types()) == set(owners) | system_types


def test_the_wiring_builds_each_domain_s_processes_under_its_channels() -> None:
    built = [p.name for p in build_processes(Settings(cdc_enabled=True))]
    assert built == [c.name for d in DOMAINS for c in d.channels]


def test_a_channel_claimed_by_two_domains_is_refused_naming_both() -> None:
    other = Domain(name="other", contracts=(), channels=ORDERS.channels[2:], processes=_none)
    both = r"channel 'payment' is declared 2 times \(domain orders, other\)"
    with pytest.raises(ValueError, match=both):
        check_domains((ORDERS, other))


def test_a_read_model_or_saga_type_declared_twice_is_refused() -> None:
    copy = replace(ORDERS, name="copy", channels=(), contracts=())
    with pytest.raises(ValueError, match=r"read model 'orders' is declared 2 times"):
        check_domains((ORDERS, copy))
    with pytest.raises(ValueError, match=r"saga type 'order' is declared 2 times \(domain twice\)"):
        replace(ORDERS, saga_types=ORDERS.saga_types * 2, name="twice")


def test_a_saga_type_whose_model_the_domain_does_not_declare_is_refused() -> None:
    undeclared = r"domain 'x': saga type 'order' shows its status in read model 'orders'"
    with pytest.raises(ValueError, match=undeclared):
        replace(ORDERS, name="x", read_models=ORDERS.read_models[1:])


def test_an_entity_type_two_domains_processes_claim_is_refused() -> None:
    """The entity type prefixes every event key: two domains publishing under one would
    mix their entities' streams."""
    payments: Domain[object] = Domain(
        name="payments",
        contracts=(),
        channels=(ProcessChannel("payments", PaymentGateway),),
        processes=lambda _: [PaymentGateway(name="payments")],
    )
    built = {"orders": ORDERS.build(Settings()), "payments": payments.build(None)}
    both = r"entity type 'payment' is declared 2 times \(domain orders, payments\)"
    with pytest.raises(ValueError, match=both):
        check_domains((ORDERS, payments), built)


def test_a_domain_that_builds_a_process_for_no_channel_of_its_own_is_refused() -> None:
    short = replace(ORDERS, name="short", channels=ORDERS.channels[:2])
    with pytest.raises(ValueError, match=r"built a PaymentGateway named 'payment', which none"):
        short.build(Settings())
    missing = replace(ORDERS, processes=lambda s: order_domain.processes(s)[:2])
    with pytest.raises(ValueError, match=r"for its channels .*: one for each"):
        missing.build(Settings())


def test_every_domain_s_api_module_exports_its_routers_and_the_app_serves_them() -> None:
    routers = domain_routers()
    document = create_api(Settings()).openapi()
    served = {(m, path) for path, ops in document["paths"].items() for m in ops}
    declared = set(operations(*routers.commands, *routers.queries))
    assert declared and declared <= served
    tags = {t["name"] for t in document["tags"]}
    assert {t["name"] for t in routers.tags} <= tags
    with_api = [d for d in DOMAINS if d.api is not None]
    assert len(routers.commands) >= len(with_api) and len(routers.queries) >= len(with_api)


def operations(*routers: APIRouter) -> list[tuple[str, str]]:
    """(method, path) of each route of ``routers``, as the OpenAPI document names them."""
    return [
        (method.lower(), route.path)
        for router in routers
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    ]


@pytest.fixture
def api_module() -> Iterator[ModuleType]:
    module = ModuleType("tests.unit.fake_domain_api")
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_a_domain_naming_a_missing_api_module_is_refused_with_a_sentence() -> None:
    lost = replace(ORDERS, name="lost", api="services.api.no_such_module")
    with pytest.raises(
        ValueError,
        match=r"domain 'lost' names API module 'services.api.no_such_module', which does not exist",
    ):
        domain_routers((lost,))


def test_an_api_module_without_its_routers_or_their_tags_is_refused(api_module: ModuleType) -> None:
    domain = replace(ORDERS, name="fake", api=api_module.__name__)
    vars(api_module).update(COMMAND_ROUTERS=(APIRouter(tags=["fakes"]),))
    with pytest.raises(ValueError, match=r"domain 'fake': .* must export QUERY_ROUTERS, a tuple"):
        domain_routers((domain,))
    vars(api_module).update(QUERY_ROUTERS=[APIRouter()])  # a list: not frozen
    with pytest.raises(ValueError, match=r"must export QUERY_ROUTERS"):
        domain_routers((domain,))
    vars(api_module).update(QUERY_ROUTERS=())
    with pytest.raises(ValueError, match=r"must export TAGS, .* \(fakes\)"):
        domain_routers((domain,))
    vars(api_module).update(TAGS=({"name": "fakes", "description": "Fakes"},))
    assert domain_routers((domain,)).tags == vars(api_module)["TAGS"]


def _none(_: Any) -> list[Any]:
    return []


def test_every_domain_s_demo_module_tells_a_story_and_a_missing_one_is_refused(
    api_module: ModuleType,
) -> None:
    for domain in DOMAINS:
        if domain.demo is not None:
            assert inspect.iscoroutinefunction(story_of(domain, domain.demo)), domain.name
    with pytest.raises(ValueError, match=r"domain 'orders' names demo module 'sagaline.nope'"):
        story_of(ORDERS, "sagaline.nope")
    with pytest.raises(ValueError, match=r"demo module 'tests.unit.fake_domain_api' must export"):
        story_of(ORDERS, api_module.__name__)


def test_a_cancellation_of_a_saga_type_the_domain_does_not_run_is_refused() -> None:
    stray = replace(ORDERS.cancellations[0], entity_type="payment")
    with pytest.raises(ValueError, match=r"how to cancel a 'payment' saga, which is none of"):
        replace(ORDERS, cancellations=(stray,))
