"""The REST API keeps its OpenAPI contract under fuzzing: schemathesis with every check on.

The API runs for real (uvicorn on a free port, its own lifespan: a CommandBus on the shared
broker with an isolated topic prefix, a migrated SQLite read model). Schemathesis generates
valid and invalid requests for every operation of ``/openapi.json`` (the examples, coverage
and fuzzing phases, unsupported methods included) and checks each answer: never a 5xx, only
documented status codes, content types, headers and bodies, invalid data rejected, valid
data accepted.

Then the hostile bodies by hand, over a real socket: too long by Content-Length and by a
chunked stream, invalid UTF-8, deep nesting, NaN, a Decimal in a 422.

Every request carries an API key with every scope (as a client would); schemathesis's
``ignored_auth`` check also sends each operation without it and with a wrong one, and
expects the 401 the document declares.
"""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from aiokafka.admin import AIOKafkaAdminClient
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from sqlalchemy import create_engine

from readside import store
from readside.migrate import upgrade
from runtime.settings import Settings
from runtime.topics import create_topics, declared_topics
from services.api.app import create_api
from services.api.queries import MAX_WAIT_S, TOKEN_PATTERN
from services.keys import ensure_local_key
from tests.integration.harness import broker_reachable, free_port, isolated_settings

pytestmark = pytest.mark.integration

MAX_BODY = Settings.model_fields["api_max_body_bytes"].default
"""The default limit: the fuzzer's largest bodies (101 order lines) stay under it."""
SHORT_WAIT = 0.2
"""What a generated ``?wait=`` (up to 30 s) becomes."""
APPLIED_TOKEN = "cmd-" + "a" * 32
"""A consistency token whose command the read model records as applied."""

CONFIG = SchemathesisConfig.from_dict(
    {
        "seed": 20261123,
        "generation": {"max-examples": 150, "deterministic": True},
        "checks": {"enabled": True},
    }
)
SCHEMA = schemathesis.openapi.from_dict(
    create_api(Settings(api_max_body_bytes=MAX_BODY)).openapi(), config=CONFIG
)


@pytest.fixture(scope="module")
def contract_tmp(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return tmp_path_factory.mktemp("contract")


@pytest.fixture(scope="module")
def auth(contract_tmp: Any) -> dict[str, str]:
    """The Authorization header of a key with every scope."""
    keys = contract_tmp / "api-keys"
    return {"Authorization": f"Bearer {ensure_local_key(contract_tmp / 'api-key', keys)}"}


@pytest.fixture(scope="module")
def api_url(contract_tmp: Any, auth: dict[str, str]) -> Iterator[str]:
    """The real API on a free port, in a thread with its own event loop."""
    if not broker_reachable():
        raise RuntimeError("no Kafka broker: start one with `deploy/local/kafka.sh start`")
    tmp = contract_tmp
    database = f"sqlite:///{tmp / 'read.db'}"
    upgrade(database)
    engine = create_engine(database)
    with engine.begin() as conn:
        receipt = {"command_id": APPLIED_TOKEN, "entity_key": "product:p"}
        at = {"topic_partition": 0, "topic_offset": 0, "applied_at": datetime.now(UTC)}
        store.add_receipts(conn, [receipt | at])
    engine.dispose()
    api_settings = isolated_settings(
        tmp,
        database_url=database,
        read_poll_ms=5,
        api_max_body_bytes=MAX_BODY,
        api_keys_file=tmp / "api-keys",
    )
    asyncio.run(create_topics(api_settings))
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_api(api_settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, name="api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)
        asyncio.run(_delete_topics(api_settings))


async def _delete_topics(api_settings: Settings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=api_settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([t.name for t in declared_topics(api_settings)])
    finally:
        await admin.close()


# --- the contract, fuzzed ---------------------------------------------------------------


@SCHEMA.parametrize()
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_operation_keeps_the_openapi_contract(
    case: Any, api_url: str, auth: dict[str, str]
) -> None:
    params, headers = _short_waits(case)
    _one_line_per_product(case)
    headers |= _fresh_idempotency_key(case)
    case.call_and_validate(
        base_url=api_url,
        params=params,
        headers=headers | auth,
        excluded_checks=_excluded_checks(case),
    )


COMBINED_FILTERS = {("GET", "/sagas"), ("GET", "/overview/sagas")}
"""The saga list's operations: their filters, each valid alone, can contradict each other (a
student filter on order sagas, a status outside the outcome asked, an empty time window),
answered 422 with a sentence, which OpenAPI cannot state; and like every GET of this API
they ignore a query parameter they do not know, which the fuzzer's negative cases send. So
the two "accepted/rejected as the schema says" checks do not hold there; every other check
(status codes documented, bodies matching their schema, no 500) does."""


def _excluded_checks(case: Any) -> list[Any]:
    if (case.method.upper(), case.operation.path) in COMBINED_FILTERS:
        return [positive_data_acceptance, negative_data_rejection]
    if RULES in case.operation.definition.raw:
        return [positive_data_acceptance]
    return []


RULES = "x-rules"
"""An operation's rules that its schema cannot state (two fields that must differ), listed
in the document for clients: a request the schema allows may be refused by one, with a 422
saying which; every other check holds."""


def test_sequences_of_calls_keep_the_contract(api_url: str, auth: dict[str, str]) -> None:
    """The stateful phase: chains along the links schemathesis infers (the ``order_id`` of a
    202 into GET /orders/{order_id} and its cancel). No projector runs here, so the orders
    are 404s: the chains check the API's answers, not the saga."""

    class Chains(SCHEMA.as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: Any) -> None:
            _one_line_per_product(case)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            params, headers = _short_waits(case)
            headers |= _fresh_idempotency_key(case)
            return {"base_url": api_url, "params": params, "headers": headers | auth}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, excluded_checks=_excluded_checks(case))

    Chains.TestCase.settings = settings(
        max_examples=25,
        stateful_step_count=6,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    Chains.TestCase().runTest()


def _short_waits(case: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Query and header overrides: a token the API would accept becomes APPLIED_TOKEN (a
    token no command ever had waits its whole ``wait``, then is a 504: tested on its own
    below) and a ``wait`` it would accept becomes SHORT_WAIT (GET /orders/{id}?wait= waits
    that long for a final status). Values the API refuses stay as generated: they are a 422
    before any wait. Overrides, not edits of the case: an edited case is revalidated, and
    schemathesis 4.32 then forgets that another of its parts (a header) was invalid."""
    params: dict[str, Any] = {}
    headers: dict[str, str] = {}
    if case.method.upper() != "GET":
        return params, headers
    if isinstance(case.query, dict):
        if _accepted_token(case.query.get("consistency_token")):
            params["consistency_token"] = APPLIED_TOKEN
        if _accepted_wait(case.query.get("wait")):
            params["wait"] = SHORT_WAIT
    # schemathesis 4.32's coverage phase labels some cases valid whose header it generated
    # invalid ("0"); such a header becomes valid too, so the case is what it is labelled.
    labelled_valid = case.meta.generation.mode.is_positive
    for name, value in (case.headers or {}).items():
        if name.lower() == "x-consistency-token" and (labelled_valid or _accepted_token(value)):
            headers[name] = APPLIED_TOKEN
    return params, headers


def _fresh_idempotency_key(case: Any) -> dict[str, str]:
    """A header override: an Idempotency-Key the API would accept, made unique to this call.
    The fuzzer sends a few keys ("", "0") with many bodies, and the same key with another
    body is a 422 (tests/unit/test_api_idempotency.py), so each case is judged on its own."""
    for name, value in (case.headers or {}).items():
        if name.lower() == "idempotency-key" and isinstance(value, str) and len(value) <= 200:
            return {name: f"{value[:160]}.{uuid.uuid4().hex}"}
    return {}


def _accepted_token(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(TOKEN_PATTERN, value) is not None


def _accepted_wait(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        return 0 <= float(value) <= MAX_WAIT_S
    except ValueError:
        return False


def _one_line_per_product(case: Any) -> None:
    """The one rule of POST /orders that JSON Schema cannot say (its description does):
    each product on one line. A repeated valid id gets a suffix; bodies that break the rule
    are 422s, tested on their own below."""
    if not case.meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return
    if not isinstance(case.body.get("lines"), list):
        return
    seen: set[str] = set()
    for n, line in enumerate(case.body["lines"]):
        if not isinstance(line, dict) or not isinstance(line.get("product_id"), str):
            continue
        product = line["product_id"]
        if product in seen and re.fullmatch(r"[A-Za-z0-9._:-]{1,100}", product):
            line["product_id"] = f"{product[:90]}.{n}"
        seen.add(line["product_id"])


# --- hostile bodies, by hand ------------------------------------------------------------


def raw_request(
    api_url: str, head: str, chunks: list[bytes], auth: dict[str, str]
) -> tuple[int, str]:
    """Send ``head`` (with the key of ``auth``) and the body ``chunks`` as written; the status
    and the body of the answer (which may come before the whole body is sent)."""
    head += "".join(f"{name}: {value}\n" for name, value in auth.items())
    host, port = api_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before reading the rest: that is the point
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < _expected_length(answer):
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    status_line, _, rest = answer.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), body.decode()


def _expected_length(answer: bytes) -> int:
    head, sep, _ = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(head) + len(sep) + int(line.split(b":")[1])
    return 0


def assert_sentence(response: httpx.Response | tuple[int, str], status: int, *words: str) -> None:
    if isinstance(response, httpx.Response):
        code, text = response.status_code, response.text
    else:
        code, text = response
    assert code == status, text
    body = httpx.Response(200, content=text).json()
    assert set(body) == {"message", "detail"}, body
    message = body["message"]
    assert isinstance(message, str) and " " in message, body
    for word in words:
        assert word in message, (word, message)


def test_a_content_length_over_the_limit_is_a_413_before_the_body_is_read(
    api_url: str,
    auth: dict[str, str],
) -> None:
    # Claims 10 MB, sends nothing: the answer cannot have waited for the body.
    answer = raw_request(
        api_url,
        "POST /orders HTTP/1.1\nHost: api\nContent-Type: application/json\n"
        f"Content-Length: {10_000_000}\nConnection: close\n",
        [],
        auth,
    )
    assert_sentence(answer, 413, "larger than", f"{MAX_BODY} bytes")


def test_a_chunked_body_over_the_limit_is_a_413_while_it_streams(
    api_url: str, auth: dict[str, str]
) -> None:
    chunk = b" " * 1000  # JSON whitespace: only the length is wrong
    chunks = MAX_BODY // len(chunk) + 2
    framed = [b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(chunks)] + [b"0\r\n\r\n"]
    answer = raw_request(
        api_url,
        "POST /orders HTTP/1.1\nHost: api\nContent-Type: application/json\n"
        "Transfer-Encoding: chunked\nConnection: close\n",
        framed,
        auth,
    )
    assert_sentence(answer, 413, "larger than", f"{MAX_BODY} bytes")


def test_a_chunked_body_under_the_limit_is_read(api_url: str, auth: dict[str, str]) -> None:
    body = b'{"on_hand": 3}'
    answer = raw_request(
        api_url,
        "PUT /products/chunked/stock HTTP/1.1\nHost: api\nContent-Type: application/json\n"
        "Transfer-Encoding: chunked\nConnection: close\n",
        [b"%x\r\n%s\r\n" % (len(body), body), b"0\r\n\r\n"],
        auth,
    )
    assert answer[0] == 202, answer


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"customer_id": "\xff\xfe"}', ["not valid JSON", "not UTF-8"]),
        (b"[" * (MAX_BODY - 1), ["not valid JSON", "nested deeper than"]),
        (b'{"a": ' * (MAX_BODY // 6), ["not valid JSON", "nested deeper than"]),
        (b'{"customer_id": "\\ud800"}', ["not valid JSON", "lone surrogate"]),
        (b'{"customer_id": NaN}', ["not valid JSON", "NaN"]),
        (b'{"quantity": Infinity}', ["not valid JSON", "Infinity"]),
        (b'{"quantity": 1e999}', ["not valid JSON", "out of range"]),
        (b'{"customer_id": "c", ', ["not valid JSON", "ends early"]),
    ],
    ids=[
        "invalid-utf8",
        "deep-arrays",
        "deep-objects",
        "lone-surrogate",
        "nan",
        "infinity",
        "1e999",
        "cut-off",
    ],
)
def test_a_body_that_is_not_json_is_a_400_naming_the_problem(
    api_url: str, auth: dict[str, str], body: bytes, words: list[str]
) -> None:
    response = httpx.post(
        f"{api_url}/orders",
        content=body,
        headers={"Content-Type": "application/json"} | auth,
        timeout=10,
    )
    assert_sentence(response, 400, *words)


def test_a_hundred_thousand_brackets_are_a_413_sentence(api_url: str, auth: dict[str, str]) -> None:
    response = httpx.post(
        f"{api_url}/orders",
        content=b"[" * 100_000,
        headers={"Content-Type": "application/json"} | auth,
        timeout=10,
    )
    assert_sentence(response, 413, "larger than")


def test_numbers_beyond_what_the_read_model_stores_are_a_4xx_sentence(
    api_url: str, auth: dict[str, str]
) -> None:
    # Past 64 bits the reader of untrusted JSON refuses the number before any model sees it.
    for on_hand, status, words in (
        (b"9" * 4000, 400, "integer of 4000 digits is out of range"),
        (b"2147483648", 422, "on_hand"),
        (b"-1", 422, "on_hand"),
    ):
        response = httpx.put(
            f"{api_url}/products/p/stock",
            content=b'{"on_hand": ' + on_hand + b"}",
            headers={"Content-Type": "application/json"} | auth,
            timeout=10,
        )
        assert_sentence(response, status, words)


def test_the_fuzzers_order_with_a_negative_decimal_is_a_422_naming_the_field(
    api_url: str,
    auth: dict[str, str],
) -> None:
    body = {
        "lines": [
            {"product_id": "E5B9e", "quantity": 2343, "unit_price": 57242},
            {"unit_price": -1499, "quantity": 2031, "product_id": "oHm"},
        ],
        "payment": {},
        "customer_id": "lÅ",
    }
    response = httpx.post(f"{api_url}/orders", json=body, headers=auth, timeout=10)
    assert_sentence(response, 422, "lines.1.unit_price", "payment.method")
    problems = response.json()["detail"]
    assert {tuple(p["loc"]) for p in problems} >= {("body", "lines", 1, "unit_price")}
    assert all(set(p) == {"loc", "msg", "type"} for p in problems)  # no input, no ctx


def test_two_lines_for_one_product_are_a_422_asking_to_merge_them(
    api_url: str, auth: dict[str, str]
) -> None:
    line = {"product_id": "p", "quantity": 1, "unit_price": "1.00"}
    body = {"customer_id": "c", "lines": [line, line], "payment": {"method": "card"}}
    response = httpx.post(f"{api_url}/orders", json=body, headers=auth, timeout=10)
    assert_sentence(response, 422, "lines", "merge the quantities")


def test_a_4xx_never_echoes_a_long_input(api_url: str, auth: dict[str, str]) -> None:
    long_value = "x" * 3000
    for body, status in (
        ({"on_hand": long_value}, 422),
        ({"on_hand": -1, long_value: 1}, 400),  # a field name past 128 characters
    ):
        response = httpx.put(f"{api_url}/products/p/stock", json=body, headers=auth, timeout=10)
        assert response.status_code == status, response.text
        assert long_value not in response.text
        assert len(response.text) < 2000


def test_a_body_that_is_not_sent_as_json_is_a_415(api_url: str, auth: dict[str, str]) -> None:
    for headers in ({"Content-Type": "text/plain"}, {}):
        response = httpx.put(
            f"{api_url}/products/p/stock",
            content=b'{"on_hand": 1}',
            headers=headers | auth,
            timeout=10,
        )
        assert_sentence(response, 415, "Content-Type: application/json")


def test_a_token_nobody_applied_is_a_504_sentence_after_the_wait(
    api_url: str, auth: dict[str, str]
) -> None:
    never = "cmd-" + "0" * 32
    response = httpx.get(
        f"{api_url}/sagas/s?consistency_token={never}&wait=0.2", headers=auth, timeout=10
    )
    assert_sentence(response, 504, "has not caught up", never, "0.2 s")
    for wait in ("", "&wait=0"):  # wait=0: no waiting, but an applied token is no 504
        applied = httpx.get(
            f"{api_url}/sagas/s?consistency_token={APPLIED_TOKEN}{wait}", headers=auth, timeout=10
        )
        assert_sentence(applied, 404, "saga 's' not found")


def test_an_id_with_a_nul_is_a_422_not_a_database_error(api_url: str, auth: dict[str, str]) -> None:
    for path in ("/orders/a%00b", "/sagas/a%00b", "/customers/a%00b/orders"):
        assert_sentence(
            httpx.get(f"{api_url}{path}", headers=auth, timeout=10), 422, "NUL character"
        )


def test_an_unknown_route_is_a_404_sentence(api_url: str, auth: dict[str, str]) -> None:
    response = httpx.get(f"{api_url}/nowhere", headers=auth, timeout=10)
    assert_sentence(response, 404, "no route matches GET /nowhere")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/products/p/stock", "GET, PUT"),
        ("POST", "/products/p/stock", "GET, PUT"),
        ("OPTIONS", "/products/p/stock", "GET, PUT"),
        ("PUT", "/orders", "POST"),
        ("GET", "/orders/o/cancel", "POST"),
        ("DELETE", "/orders/o", "GET"),
    ],
)
def test_a_wrong_method_is_a_405_whose_allow_header_names_every_method_of_the_path(
    api_url: str, auth: dict[str, str], method: str, path: str, allow: str
) -> None:
    response = httpx.request(method, f"{api_url}{path}", headers=auth, timeout=10)
    assert_sentence(response, 405, f"{method} is not allowed", allow)
    assert response.headers["allow"] == allow


def test_every_error_status_in_the_openapi_document_has_the_one_error_model() -> None:
    document: dict[str, Any] = SCHEMA.raw_schema
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status < "400":
                    continue
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
            if method in ("post", "put") and "requestBody" in operation:
                assert {"400", "413", "415", "422", "503"} <= operation["responses"].keys()


def test_every_route_but_healthz_declares_the_api_key_and_its_refusals() -> None:
    document: dict[str, Any] = SCHEMA.raw_schema
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if path == "/healthz":
                assert "security" not in operation
                assert "401" not in operation["responses"]
                continue
            assert operation["security"] == [{"ApiKey": []}], (method, path)
            # 429: any keyed route may throttle a key it must check (services.api.keychecks).
            assert {"401", "403", "429"} <= operation["responses"].keys(), (method, path)
            challenge = operation["responses"]["401"]["headers"]["WWW-Authenticate"]
            assert challenge["required"] is True
