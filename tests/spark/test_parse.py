"""The native checks against the projector's own code, record by record.

Golden events of every registered type must be vouched for and read exactly as pydantic
reads them (summary lines included); no record the native checks vouch for may be one the
projector would reject or store differently; and the exact route must give the projector's
own verdict and reason.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from readside.triage import Rejected, triage
from sagas.catalog import READ_MODELS, SAGA_TYPES
from sagas.contracts import enrollment as ec
from sagas.contracts.orders import OrderPlaced, OrderStatusChanged
from sagas.messages import Envelope, Message
from sagas.projections.declare import subtypes
from sagas.projections.rows import summarize
from spark_projections import contract, parse, pipeline
from spark_projections.summary import summary
from tests.spark import enrollments, golden, history
from tests.spark.compare import assertDataFrameEqual
from tests.spark.frames import place, records_frame

pytestmark = pytest.mark.spark


def _golden_raws() -> list[tuple[bytes | None, bytes | None]]:
    return [(e.key.encode(), e.encode()) for e in golden.golden_events()]


def _corpus() -> list[tuple[bytes | None, bytes | None]]:
    """Golden events, every kind of malformed record, lax ones, and near misses of the
    canonical form that pydantic reads differently (escapes, exponents, zero fractions)."""
    events = history.order_history(8, products=2, seed=9)
    sample = next(e for e in events if e.type == "order.StatusChanged" and e.sequence == 2)
    good = json.loads(sample.encode())
    key = sample.key.encode()

    def variant(text: str) -> tuple[bytes, bytes]:
        return key, text.encode()

    canonical = sample.encode().decode()
    near_misses = [
        variant(canonical.replace('"PENDING"', '"PEND\\u0049NG"')),
        variant(canonical.replace("Z", ".000000Z", 1)),
        variant(canonical + "\n"),
        variant(canonical.replace('"sequence":2', '"sequence":2.0')),
        variant(canonical.replace('"sequence":2', '"sequence":"2"')),
        variant(canonical.replace('"schema_version":1,', "")),
        variant(json.dumps({**good, "saga_id": None})),
        variant(json.dumps({**good, "payload": {"status": "PENDING"}})),
        variant(json.dumps({"extra": 1, **good})),
        (None, canonical.encode()),  # no record key: refused, though the text is canonical
    ]
    placed = next(e for e in events if e.type == "order.Placed").encode().decode()
    near_misses += [
        (key, placed.replace('"total":"', '"total":"1E+').encode()),
        (key, placed.replace('"quantity":', '"quantity":-').encode()),
        (key, placed.replace('"unit_price":"', '"unit_price":"1000000000').encode()),
        (key, placed.replace('"product_id":"', '"product_id":"bad id ').encode()),
    ]
    # One record past each limit a declared read model's columns set (the native checks
    # must send them the exact route, where the projector words the reason).
    fact = next(e for e in events if e.type == "ledger.CapacitySet")
    fact_text, fact_key = fact.encode().decode(), fact.key.encode()
    on_hand = f'"on_hand":{fact.payload["on_hand"]}'
    long_product = "product:" + "p" * 101
    near_misses += [
        (fact_key, fact_text.replace(on_hand, '"on_hand":4294967296').encode()),
        (
            fact_key,
            fact_text.replace(on_hand, '"on_hand":2147483647')
            .replace(f'"reserved":{fact.payload["reserved"]}', '"reserved":-1')
            .encode(),
        ),
        (long_product.encode(), fact_text.replace(fact.key, long_product).encode()),
        (key, placed.replace('"customer_id":"', '"customer_id":"' + "c" * 100).encode()),
        (key, placed.replace('"total":"', '"total":"999999999999').encode()),
    ]
    return [
        *_golden_raws(),
        *history.encoded(events),
        *history.malformed(sample),
        *history.lax_order(),
        *near_misses,
        *_enrollment_near_misses(),
        *enrollments.lax_course(),
    ]


def _enrollment_near_misses() -> list[tuple[bytes | None, bytes | None]]:
    """Lists of strings and of models, and a field name two types type differently
    (``waitlist``), written just off what pydantic accepts or writes back."""
    by_type: dict[str, Envelope] = {}
    for event in golden.golden_events():
        by_type.setdefault(event.type, event)  # the plain sample of each type
    course = by_type[ec.CourseSet.TYPE]
    text, key = course.encode().decode(), course.key.encode()
    entry = '{"enrollment_id":"enrollment_id-1","student_id":"student_id-1","position":3}'
    assert entry in text and '"enrolled":["enrolled-1"]' in text
    misses = [
        text.replace('"position":3', '"position":0'),
        text.replace('"position":3', '"position":3.0'),
        text.replace('"enrollment_id":"enrollment_id-1"', '"enrollment_id":"bad id"'),
        text.replace(entry, entry[:-1] + ',"extra":1}'),
        text.replace(entry, '{"student_id":"student_id-1","enrollment_id":"e-1","position":3}'),
        text.replace(entry, entry + ",null"),
        text.replace('"enrolled":["enrolled-1"]', '"enrolled":["enrolled-1",null]'),
        text.replace('"enrolled":["enrolled-1"]', '"enrolled":[1]'),
        text.replace('"enrolled":["enrolled-1"]', '"enrolled":"enrolled-1"'),
        text.replace('"enrolled":["enrolled-1"]', '"enrolled":[ "enrolled-1"]'),
        text.replace('"waitlist":[', '"waitlist":true,"w":['),
        text.replace(entry, ""),
    ]
    requested = by_type[ec.EnrollmentRequested.TYPE]
    r_text = requested.encode().decode()
    assert '"waitlist":true' in r_text
    r_misses = [
        r_text.replace('"waitlist":true', '"waitlist":"true"'),
        r_text.replace('"waitlist":true', '"waitlist":1'),
        r_text.replace('"waitlist":true', '"waitlist":[]'),
        r_text.replace('"waitlist":true', '"waitlist":false'),
    ]
    return [(key, m.encode()) for m in misses] + [
        (requested.key.encode(), m.encode()) for m in r_misses
    ]


def test_every_domain_event_has_a_native_path() -> None:
    """Every type the declarations or the summaries treat specially is one the processes
    publish, and each of those has a native contract (the others take the exact route)."""
    summarized = {t for t, m in Message.known_types().items() if m.SUMMARY is not None}
    read = {t for model in READ_MODELS for of in model.event_types() for t in subtypes(of)}
    statuses = {t for saga in SAGA_TYPES for t in subtypes(saga.statuses.event)}
    special = summarized | read | statuses
    published = {m.TYPE for m in contract.DOMAIN_EVENTS}
    assert special | {OrderPlaced.TYPE, OrderStatusChanged.TYPE} <= published
    assert set(contract.native_contracts()) == published


def test_every_golden_event_is_vouched_for_natively(spark: SparkSession) -> None:
    natives = set(contract.native_contracts())
    verdicts = records_frame(spark, place(_golden_raws())).transform(parse.with_verdict)
    rows = verdicts.select("e_type", "fast").collect()
    assert {r["e_type"] for r in rows} == set(contract.known_types())
    assert {r["e_type"] for r in rows if r["fast"]} == natives


def test_the_summary_of_every_type_and_branch_is_summarize(spark: SparkSession) -> None:
    events = golden.golden_events()
    verdicts = records_frame(spark, place(_golden_raws())).transform(parse.with_verdict)
    actual = verdicts.select(
        F.col("e_key").alias("key"), summary(F.col("e_type"), F.col("p")).alias("summary")
    )
    expected = spark.createDataFrame(
        [(e.key, summarize(e.message())) for e in events], actual.schema
    )
    assertDataFrameEqual(actual, expected)


def test_what_the_native_checks_accept_the_projector_accepts_and_stores_alike(
    spark: SparkSession,
) -> None:
    raws = _corpus()
    first = records_frame(spark, place(raws)).transform(pipeline.first_pass)
    texts = first.where("fast").select("partition", "offset", parse.stored_text().alias("text"))
    vouched = {(r["partition"], r["offset"]): r["text"] for r in texts.collect()}
    by_place = {(p, o): (k, v) for p, o, k, v in place(raws)}
    assert len(vouched) >= len(golden.golden_events())
    for where, text in vouched.items():
        verdict = triage(*by_place[where])
        assert isinstance(verdict, Envelope), (where, verdict)
        assert verdict.encode().decode() == text


def test_the_exact_route_gives_the_projectors_verdict_and_reason(spark: SparkSession) -> None:
    raws = _corpus()
    first = records_frame(spark, place(raws)).transform(pipeline.first_pass)
    exact = parse.exact_verdicts(first).collect()
    by_place = {(p, o): (k, v) for p, o, k, v in place(raws)}
    assert len(exact) > 20
    for row in exact:
        expected = triage(*by_place[(row["partition"], row["offset"])])
        if isinstance(expected, Rejected):
            assert row["verdict"]["reason"] == expected.reason
        else:
            assert row["verdict"]["envelope"] == expected.encode().decode()


def test_skeletons_match_only_what_envelope_encode_writes() -> None:
    import re

    for event in golden.golden_events():
        if event.type not in contract.native_contracts():
            continue
        pattern = contract.skeleton(event.type).replace("\\z", "\\Z")  # Python spells it \Z
        assert re.match(pattern, event.encode().decode()), event.type
        assert not re.match(pattern, event.encode().decode() + " "), event.type


def test_a_full_roster_is_vouched_for_natively(spark: SparkSession) -> None:
    """The longest course fact a course writes (every seat taken by the longest ids, the
    waitlist full): its skeleton must match without overflowing Java's regex stack."""
    seats = ec.MAX_SEATS
    fact = golden.sample(
        ec.SeatHeld,
        enrolled=tuple(f"s{i:0{ec.MAX_ID - 1}d}" for i in range(seats)),
        waitlist=tuple(
            ec.WaitlistEntry(
                enrollment_id=f"e{i:0{ec.MAX_ENROLLMENT_ID - 1}d}",
                student_id=f"w{i:0{ec.MAX_ID - 1}d}",
                position=i + 1,
            )
            for i in range(seats)
        ),
    )
    event = Envelope.wrap(
        fact,
        message_id="m-full",
        key="course:full",
        occurred_at=golden.T0,
        entity_type="course",
        sequence=1,
    )
    raws = [(event.key.encode(), event.encode())]
    verdicts = records_frame(spark, place(raws)).transform(parse.with_verdict)
    assert [r["fast"] for r in verdicts.select("fast").collect()] == [True]
