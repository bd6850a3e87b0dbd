"""The promises, checked after a cycle's drain. Each check returns violations; a violation
names the order, product or record and carries the evidence to start debugging with."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from faults.history import History
from faults.load import Attempt, EnrollAttempt
from faults.poison import PoisonRecord
from faults.stack import RETIRE_AFTER_S, RETIRED_MARKER_S
from faults.topics import Raw
from sagas.catalog import model_for, saga_type
from sagas.contracts import enrollment as e
from sagas.contracts.orders import FINAL_STATUSES
from sagas.messages import Envelope
from sagas.projections.entity import fold_entity
from sagas.projections.orders import OrderRow
from sagas.projections.rows import TimelineRow
from sagas.projections.stock import StockRow


@dataclass(frozen=True)
class Violation:
    kind: str
    subject: str
    detail: str
    evidence: tuple[str, ...] = ()


@dataclass
class ReadModels:
    orders: dict[str, OrderRow]
    stock: dict[str, StockRow]
    timeline: set[TimelineRow]
    checkpoints: dict[int, int]
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Rows of further declared models (the enrollment ones), by model name and entity id."""


@dataclass
class Observed:
    attempts: list[Attempt]
    api_orders: dict[str, dict[str, Any]]
    """GET /orders/{id} of every accepted order after the drain (absent: 404 or no answer)."""
    stock_start: dict[str, int]
    api_stock: dict[str, dict[str, Any] | None]
    history: History
    event_ends: dict[int, int]
    dead_letters: list[Raw]
    poisons: list[PoisonRecord]
    read_models: ReadModels
    worker_lag: dict[str, int] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    """order id -> its records on the order-saga topic (only for orders not final)."""
    enrollments: list[EnrollAttempt] = field(default_factory=list)
    api_enrollments: dict[str, dict[str, Any]] = field(default_factory=dict)
    """GET /enrollments/{id} of every accepted enrollment after the drain."""
    """topic[partition] -> records the worker's stored positions are not past."""


def check_all(o: Observed) -> list[Violation]:
    return [
        *accepted_orders_final(o),
        *event_orders_final(o),
        *sequences(o.history),
        *effects_once(o.history),
        *compensations(o.history),
        *stock(o),
        *dead_letters(o),
        *read_models(o),
        *worker_behind(o),
        *malformed_events(o.history),
        *accepted_enrollments_settled(o),
        *course_seats(o.history),
        *enrollment_seats(o.history),
        *student_credits(o.history),
    ]


def accepted_orders_final(o: Observed) -> list[Violation]:
    out = []
    for a in o.attempts:
        if a.refused is not None:
            out.append(Violation("request-refused", a.order_id, f"the API answered {a.refused}"))
        if not a.accepted:
            continue
        seen = o.api_orders.get(a.order_id)
        on_topic = o.history.order_status(a.order_id)
        evidence = (
            f"  POST /orders 202 (Idempotency-Key {a.idempotency_key}, lines {a.lines}, "
            f"payment {a.method}, cancel requested {a.cancel_requested})",
            *o.history.describe(f"order:{a.order_id}"),
            *o.commands.get(a.order_id, ()),
        )
        if seen is None or not seen.get("final"):
            status = "404 (never projected)" if seen is None else seen.get("status")
            out.append(
                Violation(
                    "accepted-order-not-final",
                    f"order {a.order_id}",
                    f"GET /orders answers {status}; last status on the event topic: {on_topic}",
                    evidence,
                )
            )
        elif on_topic != seen.get("status"):
            out.append(
                Violation(
                    "api-disagrees-with-events",
                    f"order {a.order_id}",
                    f"GET /orders says {seen.get('status')}, the event topic {on_topic}",
                    evidence,
                )
            )
    return out


def event_orders_final(o: Observed) -> list[Violation]:
    """An order on the event topic must end final, whether or not its 202 reached us."""
    accepted = {a.order_id for a in o.attempts if a.accepted}
    out = []
    for key in o.history.entities("order"):
        order_id = key.split(":", 1)[1]
        if order_id in accepted or o.history.is_final(order_id):
            continue  # accepted ones are reported by accepted_orders_final
        out.append(
            Violation(
                "event-order-not-final",
                f"order {order_id}",
                f"on the event topic (202 not received by the client), last status "
                f"{o.history.order_status(order_id)}",
                tuple(o.history.describe(key)),
            )
        )
    return out


FORGOTTEN_AFTER = timedelta(seconds=RETIRE_AFTER_S + RETIRED_MARKER_S)
"""A final saga is deleted this long after its last event (retired, then its marker
forgotten); a command for it after that is taken as new (sagas/machinery/retirement.py)."""


def forgotten_then_refused(copies: list[Envelope], entity: list[Envelope]) -> bool:
    """Two events share a sequence because the later is a command refused for a key the
    worker had forgotten (``entity``: every event of the key): it numbers from 1 again. The
    documented limit of retirement (a command delayed past the marker's retention by a
    fault: the harness keeps markers 20 s, production a day), not a conflict."""
    refused = [e for e in copies if e.type.endswith(".CommandRefused")]
    if len(refused) != 1 or refused[0].payload.get("status") != "NONE":
        return False
    before = [e.occurred_at for e in entity if e.occurred_at < refused[0].occurred_at]
    return bool(before) and refused[0].occurred_at - max(before) >= FORGOTTEN_AFTER


def sequences(h: History) -> list[Violation]:
    """Per entity: each sequence is one event (copies carry the same id), and no gaps."""
    out = []
    for key, numbered in h.by_entity.items():
        for seq, copies in numbered.items():
            distinct = list({e.message_id: e for e in copies}.values())
            if len(distinct) > 1 and not forgotten_then_refused(
                distinct, [e for events in numbered.values() for e in events]
            ):
                types = sorted({e.type for e in copies})
                out.append(
                    Violation(
                        "sequence-conflict",
                        f"{key} #{seq}",
                        f"{len(distinct)} different events share one sequence: {types}",
                        tuple(
                            f"  copy {e.message_id}: {e.type} {_gist(e.payload)} saga "
                            f"{e.saga_id} caused by {e.causation_id} at "
                            f"{e.occurred_at.isoformat()}, at partition@offset "
                            f"{h.positions.get(e.message_id)}"
                            for e in distinct
                        )
                        + tuple(h.describe(key)),
                    )
                )
        present = sorted(numbered)
        missing = sorted(set(range(1, present[-1] + 1)) - set(present))
        if missing:
            out.append(
                Violation(
                    "sequence-gap",
                    key,
                    f"sequences {missing[:10]} missing (max {present[-1]})",
                    tuple(h.describe(key)),
                )
            )
    return out


def _gist(payload: dict[str, Any]) -> str:
    keep = ("status", "reservation_id", "quantity", "on_hand", "reserved", "reason")
    return str({k: payload[k] for k in keep if k in payload})


_ONCE_PER_RESERVATION = ("ledger.Reserved", "ledger.Confirmed", "ledger.Released")
_ONCE_PER_PAYMENT = ("payment.Authorized", "payment.Captured", "payment.Voided", "payment.Declined")


def effects_once(h: History) -> list[Violation]:
    """No order, reservation or payment effect applied twice (distinct sequences count)."""
    out = []
    for key in h.entities("product"):
        per: dict[tuple[str, str], int] = Counter()
        for event in h.stream(key):
            if event.type in _ONCE_PER_RESERVATION:
                per[(event.type, str(event.payload.get("reservation_id")))] += 1
        for (type_, rid), n in per.items():
            if n > 1:
                out.append(
                    Violation(
                        "effect-twice",
                        f"reservation {rid}",
                        f"{type_} {n} times on {key}",
                        tuple(line for line in h.describe(key, 40) if rid in line),
                    )
                )
    for key in h.entities("payment"):
        kinds = Counter(e.type for e in h.stream(key))
        twice = [t for t in _ONCE_PER_PAYMENT if kinds[t] > 1]
        both = kinds["payment.Authorized"] and kinds["payment.Declined"]
        if twice or both:
            out.append(
                Violation(
                    "effect-twice",
                    key,
                    f"payment facts {dict(kinds)}",
                    tuple(h.describe(key)),
                )
            )
    for key in h.entities("order"):
        stream = h.stream(key)
        placed = sum(1 for e in stream if e.type == "order.Placed")
        finals = [
            e.payload.get("status")
            for e in stream
            if e.type == "order.StatusChanged" and e.payload.get("status") in FINAL_STATUSES
        ]
        if placed > 1 or len(finals) > 1:
            out.append(
                Violation(
                    "effect-twice",
                    key,
                    f"order.Placed {placed} times, final statuses {finals}",
                    tuple(h.describe(key)),
                )
            )
    return out


def compensations(h: History) -> list[Violation]:
    """A confirmed order sold every line and captured once; any other final order holds
    no units and no money."""
    facts: dict[str, Counter[str]] = defaultdict(Counter)
    for key in h.entities("product"):
        for event in h.stream(key):
            rid = event.payload.get("reservation_id")
            if rid is not None:
                facts[str(rid)][event.type] += 1
    out = []
    for key in h.entities("order"):
        order_id = key.split(":", 1)[1]
        status = h.order_status(order_id)
        stream = h.stream(key)
        placed = next((e for e in stream if e.type == "order.Placed"), None)
        if status not in FINAL_STATUSES or placed is None:
            continue
        pay = Counter(e.type for e in h.stream(f"payment:{order_id}"))
        problems = []
        for line in placed.payload.get("lines", []):
            rid = f"{order_id}:{line['product_id']}"
            got = facts.get(rid, Counter())
            if status == "CONFIRMED":
                if got["ledger.Confirmed"] != 1 or got["ledger.Released"]:
                    problems.append(f"{rid}: {dict(got)} for a CONFIRMED order")
            elif got["ledger.Reserved"] and not got["ledger.Released"]:
                problems.append(f"{rid}: reserved, never released, order {status}")
        if status == "CONFIRMED" and (pay["payment.Captured"] != 1 or pay["payment.Voided"]):
            problems.append(f"payment {dict(pay)} for a CONFIRMED order")
        money_taken = pay["payment.Authorized"] or pay["payment.Captured"]
        if status != "CONFIRMED" and money_taken and not pay["payment.Voided"]:
            problems.append(f"payment {dict(pay)} never voided, order {status}")
        if problems:
            out.append(
                Violation(
                    "compensation-missing",
                    f"order {order_id}",
                    "; ".join(problems),
                    tuple(h.describe(key)),
                )
            )
    return out


def stock(o: Observed) -> list[Violation]:
    """on_hand_end = on_hand_start - units of CONFIRMED orders; nothing reserved."""
    sold: Counter[str] = Counter()
    for key in o.history.entities("order"):
        order_id = key.split(":", 1)[1]
        if o.history.order_status(order_id) != "CONFIRMED":
            continue
        placed = next((e for e in o.history.stream(key) if e.type == "order.Placed"), None)
        for line in placed.payload.get("lines", []) if placed else []:
            sold[line["product_id"]] += int(line["quantity"])
    out = []
    for product, start in o.stock_start.items():
        key = f"product:{product}"
        stream = o.history.stream(key)
        last = stream[-1].payload if stream else {}
        expected = start - sold[product]
        api = o.api_stock.get(product) or {}
        got = {
            "ledger on_hand": last.get("on_hand"),
            "ledger reserved": last.get("reserved"),
            "API on_hand": api.get("on_hand"),
            "API reserved": api.get("reserved"),
        }
        want = {
            "ledger on_hand": expected,
            "ledger reserved": 0,
            "API on_hand": expected,
            "API reserved": 0,
        }
        wrong = {k: v for k, v in got.items() if v != want[k]}
        if wrong:
            out.append(
                Violation(
                    "stock-mismatch",
                    f"product {product}",
                    f"start {start}, confirmed units {sold[product]}, expected on_hand "
                    f"{expected} reserved 0; got {wrong}",
                    tuple(o.history.describe(key, 8)),
                )
            )
    return out


def dead_letter_sources(dead: list[Raw]) -> set[tuple[str, int, int]]:
    """(source topic, partition, offset) of every readable dead letter."""
    found = set()
    for raw in dead:
        try:
            body = json.loads(raw.value or b"")
            found.add((str(body["source_topic"]), int(body["partition"]), int(body["offset"])))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def worker_behind(o: Observed) -> list[Violation]:
    if not o.worker_lag:
        return []
    return [
        Violation(
            "worker-behind",
            "command topics",
            f"the worker's stored positions are not at the end after the drain: {o.worker_lag}"
            " (records behind, per topic[partition]): a stopped agent or a lost commit",
        )
    ]


def dead_letters(o: Observed) -> list[Violation]:
    """Every dead letter is one of our poison records; every poison meant to be
    dead-lettered is."""
    injected = {(p.topic, p.partition, p.offset): p for p in o.poisons}
    lettered: set[tuple[str, int, int]] = set()
    out = []
    for raw in o.dead_letters:
        try:
            body = json.loads(raw.value or b"")
            where = (str(body["source_topic"]), int(body["partition"]), int(body["offset"]))
        except (ValueError, KeyError, TypeError) as exc:
            out.append(
                Violation(
                    "unexplained-dead-letter",
                    f"deadletter@{raw.offset}",
                    f"not a readable dead letter ({exc})",
                    (f"  value: {(raw.value or b'')[:300]!r}",),
                )
            )
            continue
        lettered.add(where)
        if where not in injected:
            out.append(
                Violation(
                    "unexplained-dead-letter",
                    f"{where[0]}[{where[1]}]@{where[2]}",
                    f"stage {body.get('stage')}: {str(body.get('reason'))[:300]}",
                    (
                        f"  key: {str(body.get('key'))[:200]}",
                        f"  value: {str(body.get('value'))[:400]}",
                    ),
                )
            )
    for where, poison in injected.items():
        if poison.expect == "dead-letter" and where not in lettered:
            out.append(
                Violation(
                    "poison-not-dead-lettered",
                    f"{where[0]}[{where[1]}]@{where[2]}",
                    f"poison {poison.kind} on {poison.channel} never reached the dead-letter "
                    "topic (silently dropped, or the stream stopped on it)",
                )
            )
    return out


def read_models(o: Observed) -> list[Violation]:
    """The projector's tables equal a fresh fold of the event topic; it applied it all."""
    out = []
    behind = {
        p: (o.read_models.checkpoints.get(p, 0), end)
        for p, end in o.event_ends.items()
        if o.read_models.checkpoints.get(p, 0) < end
    }
    if behind:
        out.append(
            Violation(
                "projector-behind",
                "event topic",
                f"applied offset < end offset after the drain: {behind} (partition: applied, end)",
            )
        )
    want_orders: dict[str, OrderRow] = {}
    want_stock: dict[str, StockRow] = {}
    want_timeline: set[TimelineRow] = set()
    h = o.history
    for key in h.by_entity:
        entity_type, entity_id = key.split(":", 1)
        folded = fold_entity(entity_type, None, h.contiguous(key))
        if isinstance(folded.row, OrderRow):
            want_orders[entity_id] = folded.row
        if isinstance(folded.row, StockRow):
            want_stock[entity_id] = folded.row
        want_timeline.update(folded.timeline)
    rm = o.read_models
    for name, rows in rm.tables.items():
        want_rows = {
            key.split(":", 1)[1]: row
            for key in h.by_entity
            if (model := model_for(key.split(":", 1)[0])) is not None and model.name == name
            if (row := fold_entity(model.entity_type, None, h.contiguous(key)).row)
        }
        out += _diff(f"read-model-{name}", want_rows, rows)
    out += _diff("read-model-orders", want_orders, rm.orders)
    out += _diff("read-model-stock", want_stock, rm.stock)
    missing = want_timeline - rm.timeline
    extra = rm.timeline - want_timeline
    if missing or extra:
        examples = [
            f"  missing: {r.saga_id} {r.entity_key}#{r.sequence}" for r in list(missing)[:5]
        ]
        examples += [f"  extra: {r.saga_id} {r.entity_key}#{r.sequence}" for r in list(extra)[:5]]
        out.append(
            Violation(
                "read-model-timeline",
                "saga_timeline",
                f"{len(missing)} steps missing, {len(extra)} unexpected",
                tuple(examples),
            )
        )
    return out


def _diff(kind: str, want: dict[str, Any], got: dict[str, Any]) -> list[Violation]:
    out = []
    for key in sorted(set(want) | set(got)):
        w, g = want.get(key), got.get(key)
        if w == g:
            continue
        if w is None or g is None:
            detail = "only in the read model" if w is None else "missing from the read model"
        else:
            fields = {
                f: (getattr(w, f), getattr(g, f))
                for f in type(w).model_fields
                if getattr(w, f) != getattr(g, f)
            }
            detail = f"differs (fold, table): {fields}"
        out.append(Violation(kind, key, detail))
    return out


def malformed_events(h: History) -> list[Violation]:
    return [
        Violation(
            "malformed-event",
            f"{raw.topic}[{raw.partition}]@{raw.offset}",
            f"a record on the event topic that is no domain event: {reason}",
            (f"  value: {(raw.value or b'')[:300]!r}",),
        )
        for raw, reason in h.malformed
    ]


# --- enrollments --------------------------------------------------------------------------

_ENROLLMENT = saga_type("enrollment")


def accepted_enrollments_settled(o: Observed) -> list[Violation]:
    """Every enrollment on the event topic (accepted or not) ends settled; the API agrees
    with the topic about the accepted ones."""
    h = o.history
    out = []
    for a in o.enrollments:
        if a.refused is not None:
            out.append(Violation("request-refused", f"enrollment {a.enrollment_id}", a.refused))
    accepted = {a.enrollment_id: a for a in o.enrollments if a.accepted}
    keys = set(h.entities(_ENROLLMENT.entity_type)) | {_ENROLLMENT.key(i) for i in accepted}
    for key in sorted(keys):
        enrollment_id = key.split(":", 1)[1]
        status = h.saga_status(key)
        sent = accepted.get(enrollment_id)
        evidence = tuple(h.describe(key))
        if sent is not None:
            evidence = (
                f"  POST /enrollments 202 ({sent.student_id} -> {sent.course_id}, waitlist "
                f"{sent.waitlist}, Idempotency-Key {sent.idempotency_key}), then {sent.commands}",
                *evidence,
            )
        if not _ENROLLMENT.is_settled(status):
            kind = "accepted-enrollment-not-settled" if sent else "event-enrollment-not-settled"
            out.append(
                Violation(kind, f"enrollment {enrollment_id}", f"last status {status}", evidence)
            )
        elif sent is not None and _api_status(o, enrollment_id) not in (None, status):
            out.append(
                Violation(
                    "api-disagrees-with-events",
                    f"enrollment {enrollment_id}",
                    f"GET /enrollments says {_api_status(o, enrollment_id)}, the event topic "
                    f"{status}",
                    evidence,
                )
            )
    return out


def _api_status(o: Observed, enrollment_id: str) -> str | None:
    seen = o.api_enrollments.get(enrollment_id)
    return None if seen is None else seen.get("status")


def course_seats(h: History) -> list[Violation]:
    """Per course, confirmed + held seats never exceed the capacity (every course fact
    carries both); at rest nothing is held, and its waitlist is what its enrollments say."""
    out = []
    for key in h.entities("course"):
        stream = [ev for ev in h.stream(key) if "capacity" in ev.payload]
        for ev in stream:
            taken = len(ev.payload["enrolled"]) + ev.payload["held"]
            if taken > ev.payload["capacity"]:
                out.append(
                    Violation(
                        "course-overbooked",
                        f"{key} #{ev.sequence}",
                        f"{taken} seats taken (enrolled {len(ev.payload['enrolled'])}, held "
                        f"{ev.payload['held']}) of {ev.payload['capacity']} after {ev.type}",
                        tuple(h.describe(key)),
                    )
                )
        if not stream:
            continue
        last = stream[-1].payload
        if last["held"]:
            out.append(
                Violation(
                    "seat-held-at-rest",
                    key,
                    f"{last['held']} seat(s) still held after the drain",
                    tuple(h.describe(key)),
                )
            )
        for entry in last["waitlist"]:
            saga = _ENROLLMENT.key(entry["enrollment_id"])
            status = h.saga_status(saga)
            position = _last_position(h, saga)
            if (status, position) != ("WAITLISTED", entry["position"]):
                out.append(
                    Violation(
                        "waitlist-disagrees",
                        f"{key} position {entry['position']}",
                        f"{entry['enrollment_id']} is {status} at position {position}",
                        tuple(h.describe(saga)),
                    )
                )
    return out


def _last_position(h: History, saga_key: str) -> int | None:
    changes = [ev for ev in h.stream(saga_key) if ev.type == e.EnrollmentStatusChanged.TYPE]
    return changes[-1].payload.get("waitlist_position") if changes else None


def enrollment_seats(h: History) -> list[Violation]:
    """At rest, an ENROLLED enrollment holds exactly one confirmed seat, in its course, and
    any other holds none: never two (a transfer that confirmed the new seat released the old
    one), never a seat left behind by a drop or a refusal."""
    confirmed: dict[str, set[str]] = defaultdict(set)
    for key in h.entities("course"):
        course = key.split(":", 1)[1]
        for ev in h.stream(key):
            rid = ev.payload.get("reservation_id")
            if rid is None:
                continue
            enrollment = str(rid).rsplit(":t", 1)[0]
            if ev.type == e.SeatConfirmed.TYPE:
                confirmed[enrollment].add(course)
            elif ev.type == e.SeatReleased.TYPE and ev.payload.get("reason") == "refunded":
                confirmed[enrollment].discard(course)
    out = []
    keys = set(h.entities(_ENROLLMENT.entity_type)) | {_ENROLLMENT.key(i) for i in confirmed}
    for key in sorted(keys):
        enrollment = key.split(":", 1)[1]
        status = h.saga_status(key)
        changes = [ev for ev in h.stream(key) if ev.type == e.EnrollmentStatusChanged.TYPE]
        now_in = changes[-1].payload.get("course_id") if changes else None
        want = {now_in} if status == "ENROLLED" else set()
        if confirmed[enrollment] != want:
            out.append(
                Violation(
                    "enrollment-seats",
                    f"enrollment {enrollment}",
                    f"{status} in {now_in}, confirmed seats in {sorted(confirmed[enrollment])}",
                    tuple(h.describe(key)),
                )
            )
    return out


def student_credits(h: History) -> list[Violation]:
    """Per student, used + held credits never exceed max_credits; none held at rest."""
    out = []
    for key in h.entities("student"):
        stream = [ev for ev in h.stream(key) if "max_credits" in ev.payload]
        for ev in stream:
            p = ev.payload
            if p["credits_used"] + p["credits_held"] > p["max_credits"]:
                out.append(
                    Violation(
                        "credits-overdrawn",
                        f"{key} #{ev.sequence}",
                        f"used {p['credits_used']} + held {p['credits_held']} > "
                        f"{p['max_credits']} after {ev.type}",
                        tuple(h.describe(key)),
                    )
                )
        if stream and stream[-1].payload["credits_held"]:
            out.append(
                Violation(
                    "credits-held-at-rest",
                    key,
                    f"{stream[-1].payload['credits_held']} credit(s) still held after the drain",
                    tuple(h.describe(key)),
                )
            )
    return out
