"""Every saga, as a filtered and keyset-paged list, and the overview's numbers: what the
console's pages, ``GET /sagas`` and ``GET /overview/sagas``, and ``sagaline sagas list``
share, so the three answer a filter the same way.

A filter is plain text (a URL's query, the CLI's options) checked here by :func:`parse`:
a wrong one is a :class:`FilterError` whose message is a sentence for the operator. Nothing
here names a saga type: the types, their statuses and the filterable columns come from
:data:`sagas.catalog.SAGA_TYPES` and :data:`sagas.catalog.READ_MODELS`.

**Outcomes.** A saga's status puts it in one of four disjoint outcomes: ``in_flight`` (not
settled: a step waits for an answer), ``finished`` (settled and not a failure: an order
``CONFIRMED``, an enrollment ``ENROLLED``, ``WAITLISTED`` or ``DROPPED``), ``compensated``
(a failed status, and its timeline holds a compensation: a step was undone) and ``failed``
(a failed status without one: refused before anything needed undoing). ``stuck`` is the
in-flight sagas whose row has not changed for longer than a step's deadline
(``SAGALINE_STEP_TIMEOUT_S``): their deadline passed and nothing moved them.

**Versions.** Each saga's row holds the version of its definition it runs on (its model's
``version`` column): the list filters by it and the overview counts each type per version.

**Order and paging.** Newest change first: (updated_at, saga type, saga id), descending.
A page asks each (saga type, status) the filter allows for ``limit + 1`` rows below the
cursor, in that order (each an index range: (status, updated_at, key), or (status, version,
updated_at, key) for a version), and merges them;
the cursor is the last row's sort key, so no saga is skipped or repeated across pages
however many share an ``updated_at``. A saga whose row changes between two pages moves up
the list: it may be missed by the later page or shown twice, as in any list of live rows.
"""

from __future__ import annotations

import base64
import binascii
import heapq
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import Connection

from readside import queries
from sagas.catalog import READ_MODELS, SAGA_TYPES
from sagas.projections.declare import SagaType
from sagas.untrusted import is_digits

OUTCOMES = ("in_flight", "stuck", "finished", "compensated", "failed")
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_TEXT = 200
MAX_VERSION = 2**31 - 1
"""The largest version a saga model's ``version`` column (an INTEGER) holds."""
VERSION_FILTER = (
    "Only sagas that run on this version of their saga definition (1 for a saga from before "
    "versions)"
)
PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")
WINDOWS = (("last hour", timedelta(hours=1)), ("last day", timedelta(days=1)))


class FilterError(ValueError):
    """A filter the list cannot take; its message is a sentence naming what is wrong."""


def _id_filters() -> dict[str, tuple[str, str]]:
    """``customer`` -> (saga type, column): each indexed ``<name>_id`` column of a saga
    model, by ``<name>`` (the ids an operator has in a ticket)."""
    found: dict[str, tuple[str, str]] = {}
    for saga in SAGA_TYPES:
        for index in saga.model.indexes:
            column = index.columns[0]
            if column.endswith("_id") and column != saga.model.key:
                found.setdefault(column.removesuffix("_id"), (saga.entity_type, column))
    return found


ID_FILTERS = _id_filters()
"""Row filters: an order's ``customer``, an enrollment's ``student`` and ``course``."""


def _touch_filters(row_filters: Mapping[str, object]) -> tuple[str, ...]:
    sagas = {s.entity_type for s in SAGA_TYPES}
    return tuple(
        m.entity_type
        for m in READ_MODELS
        if m.entity_type not in row_filters and m.entity_type not in sagas
    )


TOUCH_FILTERS = _touch_filters(ID_FILTERS)
"""Timeline filters: the sagas that touched a participant entity (``product``)."""
PARAMETERS = (
    "saga_type",
    "status",
    "outcome",
    "version",
    "since",
    "until",
    *ID_FILTERS,
    *TOUCH_FILTERS,
    "entity",
    "after",
    "limit",
)
"""Every parameter :func:`parse` takes; any other is refused (a typo filters nothing)."""


def saga_types() -> list[str]:
    return [s.entity_type for s in SAGA_TYPES]


def _saga(entity_type: str) -> SagaType:
    return next(s for s in SAGA_TYPES if s.entity_type == entity_type)


def statuses_of(saga: SagaType, outcome: str | None) -> list[str]:
    """The statuses of ``saga`` an outcome covers (every status for None)."""
    s = saga.statuses
    match outcome:
        case None:
            return list(s.statuses)
        case "in_flight" | "stuck":
            return [x for x in s.statuses if x not in s.settled]
        case "finished":
            return [x for x in s.statuses if x in s.settled and x not in s.failed]
        case _:
            return [x for x in s.statuses if x in s.failed]


# --- the cursor ------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Cursor:
    """A row's place in the list's order (compared as a tuple: larger is listed first)."""

    updated_at: datetime
    saga_type: str
    saga_id: str

    def encode(self) -> str:
        raw = json.dumps([self.updated_at.isoformat(), self.saga_type, self.saga_id])
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        wrong = FilterError(
            "The “after” cursor is not one this list made: use the “next page” link as "
            "it is, or drop “after” to start from the newest saga."
        )
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            at, kind, saga_id = json.loads(raw)
            when = datetime.fromisoformat(at)
        except (binascii.Error, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise wrong from exc
        if (
            kind not in saga_types()
            or not isinstance(saga_id, str)
            or not 0 < len(saga_id) <= MAX_TEXT
            or when.tzinfo is None
        ):
            raise wrong
        try:
            return cls(when.astimezone(UTC), kind, saga_id)
        except OverflowError as exc:
            raise wrong from exc


# --- the filter ------------------------------------------------------------------------


@dataclass(frozen=True)
class SagaFilter:
    saga_type: str | None = None
    status: str | None = None
    outcome: str | None = None
    version: int | None = None
    """The version of its definition the saga runs on (its model's ``version`` column)."""
    since: datetime | None = None
    until: datetime | None = None
    equals: Mapping[str, str] = field(default_factory=dict)
    """Row column -> value (``customer_id``, ``student_id``, ``course_id``)."""
    touching: str | None = None
    """An entity key the saga's timeline holds (``product:p-1``)."""
    after: Cursor | None = None
    limit: int = DEFAULT_LIMIT
    given: Mapping[str, str] = field(default_factory=dict)
    """The parameters as given (what a link to this list or its next page repeats)."""

    def types(self) -> list[SagaType]:
        """The saga types the filter can match."""
        return [s for s in SAGA_TYPES if self.saga_type in (None, s.entity_type)]

    def query(self, **changes: str | None) -> dict[str, str]:
        """The given parameters with ``changes`` (None drops one)."""
        params = dict(self.given)
        for name, value in changes.items():
            if value is None:
                params.pop(name, None)
            else:
                params[name] = value
        return params


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    if value is None or value.strip() == "":
        return None
    if len(value) > MAX_TEXT:
        raise FilterError(f"The “{name}” filter is longer than {MAX_TEXT} characters.")
    if not PRINTABLE.match(value):
        raise FilterError(f"The “{name}” filter holds control characters; an id has none.")
    return value.strip()


def _time(params: Mapping[str, str], name: str) -> datetime | None:
    value = _text(params, name)
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value.replace(" ", "+").replace("z", "Z"))
        # A time at the calendar's edge may have no UTC (0001-01-01T00:00-01:00).
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise FilterError(
            f"The “{name}” time is not a date and time like 2026-11-25T14:00:00Z "
            "(ISO 8601; without a zone it is UTC)."
        ) from exc


def parse(params: Mapping[str, str]) -> SagaFilter:
    """The filter ``params`` (a URL's query parameters, by name) ask for; a
    :class:`FilterError` says what is wrong with them."""
    unknown = sorted(set(params) - set(PARAMETERS))
    if unknown:
        raise FilterError(
            f"There is no filter “{unknown[0][:40]}”: the list filters by "
            f"{', '.join(p for p in PARAMETERS if p not in ('after', 'limit'))}."
        )
    kinds = saga_types()
    kind = _text(params, "saga_type")
    if kind is not None and kind not in kinds:
        raise FilterError(f"There is no saga type “{kind}”: choose one of {', '.join(kinds)}.")
    equals: dict[str, str] = {}
    for name, (owner, column) in ID_FILTERS.items():
        value = _text(params, name)
        if value is None:
            continue
        if kind is not None and kind != owner:
            raise FilterError(
                f"The “{name}” filter is about {owner} sagas, and the type asked is {kind}."
            )
        kind = owner
        equals[column] = value
    touching = _touching(params)
    outcome = _text(params, "outcome")
    if outcome is not None and outcome not in OUTCOMES:
        raise FilterError(f"There is no outcome “{outcome}”: choose one of {', '.join(OUTCOMES)}.")
    status = _text(params, "status")
    if status is not None:
        known = [s for s in SAGA_TYPES if kind in (None, s.entity_type)]
        having = [s for s in known if status in s.statuses.statuses]
        if not having:
            listed = sorted({x for s in known for x in s.statuses.statuses})
            raise FilterError(
                f"No {kind or 'saga'} has the status “{status}”: "
                f"the statuses are {', '.join(listed)}."
            )
        if outcome is not None and not any(status in statuses_of(s, outcome) for s in having):
            raise FilterError(f"The status {status} is never in the outcome {outcome}.")
    version = _version(params)
    since, until = _time(params, "since"), _time(params, "until")
    if since is not None and until is not None and since >= until:
        raise FilterError("The time window is empty: “since” must be before “until”.")
    after = None
    if (cursor := _text(params, "after")) is not None:
        after = Cursor.decode(cursor)
    limit = DEFAULT_LIMIT
    if (text := _text(params, "limit")) is not None:
        if not is_digits(text) or not 1 <= int(text) <= MAX_LIMIT:
            raise FilterError(f"The limit must be a whole number from 1 to {MAX_LIMIT}.")
        limit = int(text)
    given = {k: v.strip() for k, v in params.items() if v.strip() and k not in ("after",)}
    return SagaFilter(
        saga_type=kind,
        status=status,
        outcome=outcome,
        version=version,
        since=since,
        until=until,
        equals=equals,
        touching=touching,
        after=after,
        limit=limit,
        given=given,
    )


def _version(params: Mapping[str, str]) -> int | None:
    text = _text(params, "version")
    if text is None:
        return None
    if not is_digits(text) or not 1 <= int(text) <= MAX_VERSION:
        raise FilterError(
            "The version is the version of a saga's definition, a whole number from 1 "
            f"to {MAX_VERSION} (1 for a saga from before versions)."
        )
    return int(text)


def _touching(params: Mapping[str, str]) -> str | None:
    keys = [f"{name}:{value}" for name in TOUCH_FILTERS if (value := _text(params, name))]
    entity = _text(params, "entity")
    if entity is not None:
        kind, _, rest = entity.partition(":")
        if not kind or not rest:
            raise FilterError(
                "The “entity” filter is an entity key: its type, a colon and its id, "
                "like product:p-1 or course:k-1."
            )
        keys.append(entity)
    if len(keys) > 1:
        raise FilterError(f"Filter by one entity at a time (asked: {', '.join(keys)}).")
    return keys[0] if keys else None


# --- the list --------------------------------------------------------------------------


@dataclass(frozen=True)
class ListedSaga:
    saga_type: str
    saga_id: str
    status: str
    outcome: str
    version: int
    """The version of its definition it runs on."""
    reason: str | None
    created_at: datetime | None
    updated_at: datetime
    ids: dict[str, str]
    """The saga's other ids, by column (``customer_id``...)."""

    @property
    def cursor(self) -> Cursor:
        return Cursor(self.updated_at, self.saga_type, self.saga_id)


@dataclass(frozen=True)
class SagaPage:
    sagas: list[ListedSaga]
    next: Cursor | None
    """Where the next page starts; None on the last page."""
    stuck_before: datetime


def outcome_of(saga: SagaType, status: str, compensated: bool | None = None) -> str:
    s = saga.statuses
    if status not in s.settled:
        return "in_flight"
    if status not in s.failed:
        return "finished"
    return "compensated" if compensated else "failed"


def list_sagas(
    conn: Connection, wanted: SagaFilter, now: datetime, step_timeout_s: float
) -> SagaPage:
    """A page of the sagas ``wanted`` asks for, newest change first."""
    stuck_before = now - timedelta(seconds=step_timeout_s)
    until = wanted.until
    if wanted.outcome == "stuck":
        until = stuck_before if until is None else min(until, stuck_before)
    compensated = {"compensated": True, "failed": False}.get(wanted.outcome or "")
    streams: list[list[tuple[Cursor, SagaType, Any]]] = []
    for saga in wanted.types():
        statuses = statuses_of(saga, wanted.outcome)
        if wanted.status is not None:
            statuses = [s for s in statuses if s == wanted.status]
        below = _below(saga, wanted.after)
        # One stream per status when the filter names statuses or a version: each stream
        # is then a range of the (status, updated_at, key) or (status, version, ...) index.
        per_status = wanted.status or wanted.outcome or wanted.version is not None
        for status in statuses if per_status else [None]:
            rows = queries.saga_rows(
                conn,
                saga,
                status=status,
                version=wanted.version,
                limit=wanted.limit + 1,
                since=wanted.since,
                until=until,
                equals={
                    k: v for k, v in wanted.equals.items() if k in saga.model.row_type.model_fields
                },
                touching=wanted.touching,
                compensated=compensated,
                below=below,
            )
            streams.append([(_cursor(saga, r), saga, r) for r in rows])
    merged = list(heapq.merge(*streams, key=lambda item: item[0], reverse=True))
    page = merged[: wanted.limit]
    failed = [c.saga_id for c, saga, _r in page if c.saga_id and _failed(saga, _r)]
    undone = queries.compensated_among(conn, failed) if failed else set()
    sagas = [_listed(saga, row, c.saga_id in undone) for c, saga, row in page]
    more = len(merged) > wanted.limit
    return SagaPage(sagas, page[-1][0] if more and page else None, stuck_before)


def _below(saga: SagaType, after: Cursor | None) -> queries.Below | None:
    """Where ``saga``'s rows below ``after`` start in its own (updated_at, key) order: at
    one instant, a larger type name is listed first."""
    if after is None:
        return None
    if saga.entity_type == after.saga_type:
        return queries.Below(after.updated_at, after.saga_id)
    return queries.Below(after.updated_at, inclusive=saga.entity_type < after.saga_type)


def _cursor(saga: SagaType, row: Any) -> Cursor:
    return Cursor(
        getattr(row, saga.updated_column), saga.entity_type, str(getattr(row, saga.model.key))
    )


def _failed(saga: SagaType, row: Any) -> bool:
    return getattr(row, saga.status_column) in saga.statuses.failed


def _listed(saga: SagaType, row: Any, compensated: bool) -> ListedSaga:
    status = str(getattr(row, saga.status_column))
    ids = {
        c: str(getattr(row, c))
        for _name, (owner, c) in ID_FILTERS.items()
        if owner == saga.entity_type
    }
    return ListedSaga(
        saga_type=saga.entity_type,
        saga_id=str(getattr(row, saga.model.key)),
        status=status,
        outcome=outcome_of(saga, status, compensated),
        version=int(getattr(row, saga.version_column)),
        reason=getattr(row, saga.reason_column),
        created_at=getattr(row, "created_at", None),
        updated_at=getattr(row, saga.updated_column),
        ids=ids,
    )


# --- the overview ----------------------------------------------------------------------


@dataclass(frozen=True)
class WindowCounts:
    label: str
    since: datetime
    counts: dict[str, int]
    """Per outcome (``in_flight``, ``finished``, ``compensated``, ``failed``): the sagas
    whose row changed in the window, by where they are now."""


@dataclass(frozen=True)
class Counts:
    in_flight: int
    """In flight now, however long ago they started."""
    stuck: int
    by_status: dict[str, int]
    """In flight now, per status (the step each waits at)."""
    windows: list[WindowCounts]


@dataclass(frozen=True)
class VersionOverview(Counts):
    """A saga type's counts among its sagas that run on one version of its definition."""

    version: int


@dataclass(frozen=True)
class TypeOverview(Counts):
    saga_type: str
    versions: list[VersionOverview]
    """The same counts per version (every version a saga of the type has now), oldest first."""


@dataclass(frozen=True)
class Bucket:
    start: datetime
    settled: dict[str, int]
    """Per saga type, the sagas that reached a settled status in the bucket."""
    p50_ms: float | None
    p95_ms: float | None
    """Start to settled status, over every type's sagas settled in the bucket."""


@dataclass(frozen=True)
class Overview:
    at: datetime
    step_timeout_s: float
    stuck_before: datetime
    types: list[TypeOverview]
    buckets: list[Bucket]
    bucket_s: int

    @property
    def stuck(self) -> int:
        return sum(t.stuck for t in self.types)

    @property
    def in_flight(self) -> int:
        return sum(t.in_flight for t in self.types)


CHART_SPAN = timedelta(hours=1)
BUCKETS = 12


def overview(conn: Connection, now: datetime, step_timeout_s: float) -> Overview:
    """Per saga type: in flight now and stuck, and the outcomes over the last hour and day;
    throughput and latency over the last hour, in five-minute buckets."""
    stuck_before = now - timedelta(seconds=step_timeout_s)
    types: list[TypeOverview] = []
    bucket = CHART_SPAN / BUCKETS
    start = now - CHART_SPAN
    settled: list[dict[str, int]] = [{} for _ in range(BUCKETS)]
    durations: list[list[float]] = [[] for _ in range(BUCKETS)]
    for saga in SAGA_TYPES:
        s = saga.statuses
        types.append(_type_overview(conn, saga, now, stuck_before))
        for created, updated in queries.settled_since(conn, saga, sorted(s.settled), start):
            i = min(int((updated - start) / bucket), BUCKETS - 1)
            settled[i][saga.entity_type] = settled[i].get(saga.entity_type, 0) + 1
            durations[i].append((updated - created).total_seconds() * 1000)
    buckets = [
        Bucket(start + bucket * i, settled[i], *_percentiles(durations[i])) for i in range(BUCKETS)
    ]
    return Overview(now, step_timeout_s, stuck_before, types, buckets, int(bucket.total_seconds()))


def _type_overview(
    conn: Connection, saga: SagaType, now: datetime, stuck_before: datetime
) -> TypeOverview:
    """``saga``'s counts, in all and per version of its definition."""
    s = saga.statuses
    hour, day = now - WINDOWS[0][1], now - WINDOWS[1][1]
    open_ = queries.open_counts(conn, saga, statuses_of(saga, "in_flight"), stuck_before)
    changed = queries.status_counts(conn, saga, day, hour)
    failed = [x for x in s.statuses if x in s.failed]
    compensated = queries.compensated_counts(conn, saga, failed, day, hour)

    def counted(version: int | None) -> dict[str, Any]:
        undone = [pair for v, pair in compensated.items() if version in (None, v)]
        return _counts(
            saga,
            _of_version(open_, version),
            _of_version(changed, version),
            (sum(n for n, _ in undone), sum(r for _, r in undone)),
            now,
        )

    versions = sorted({v for _, v in open_} | {v for _, v in changed} | set(compensated))
    return TypeOverview(
        saga_type=saga.entity_type,
        versions=[VersionOverview(version=v, **counted(v)) for v in versions],
        **counted(None),
    )


def _of_version(split: queries.Split, version: int | None) -> dict[str, tuple[int, int]]:
    """Per status, the counts of ``version`` (None: of every version)."""
    found: dict[str, tuple[int, int]] = {}
    for (status, v), (a, b) in split.items():
        if version in (None, v):
            x, y = found.get(status, (0, 0))
            found[status] = (x + a, y + b)
    return found


def _counts(
    saga: SagaType,
    open_: Mapping[str, tuple[int, int]],
    changed: Mapping[str, tuple[int, int]],
    compensated: tuple[int, int],
    now: datetime,
) -> dict[str, Any]:
    """The fields of :class:`Counts` from one set of sagas' counts per status."""
    windows = []
    for i, (label, span) in enumerate(WINDOWS):
        counts = dict.fromkeys(("in_flight", "finished", "compensated", "failed"), 0)
        for status, pair in changed.items():
            counts[outcome_of(saga, status, False)] += pair[1 - i]
        counts["failed"] -= compensated[1 - i]
        counts["compensated"] = compensated[1 - i]
        windows.append(WindowCounts(label, now - span, counts))
    return {
        "in_flight": sum(n for n, _ in open_.values()),
        "stuck": sum(o for _, o in open_.values()),
        "by_status": {x: open_.get(x, (0, 0))[0] for x in statuses_of(saga, "in_flight")},
        "windows": windows,
    }


def _percentiles(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    values.sort()

    def at(q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    return at(0.5), at(0.95)


# --- as JSON (GET /sagas, GET /overview/sagas, ``sagaline sagas list --json``) ------------


class ListedSagaPublic(BaseModel):
    saga_type: str = Field(description="The saga's type (order, enrollment)")
    saga_id: str
    status: str = Field(description="Its current status: the step it is at, or how it ended")
    outcome: str = Field(description="in_flight, finished, compensated or failed")
    version: int = Field(
        description="The version of its saga definition it runs on (1 for a saga from before "
        "versions)"
    )
    stuck: bool = Field(
        description="In flight and unchanged for longer than a step's deadline "
        "(SAGALINE_STEP_TIMEOUT_S)"
    )
    reason: str | None
    created_at: datetime | None
    updated_at: datetime = Field(description="When its status last changed (the list's order)")
    ids: dict[str, str] = Field(description="Its other ids by column (customer_id, ...)")

    @classmethod
    def of(cls, saga: ListedSaga, stuck_before: datetime) -> ListedSagaPublic:
        return cls(
            saga_type=saga.saga_type,
            saga_id=saga.saga_id,
            status=saga.status,
            outcome=saga.outcome,
            version=saga.version,
            stuck=saga.outcome == "in_flight" and saga.updated_at < stuck_before,
            reason=saga.reason,
            created_at=saga.created_at,
            updated_at=saga.updated_at,
            ids=saga.ids,
        )


class SagaListPublic(BaseModel):
    sagas: list[ListedSagaPublic] = Field(description="Most recently changed first")
    next: str | None = Field(
        description="The next page's cursor (pass it as `after` with the same filter); "
        "null on the last page"
    )
    stuck_before: datetime = Field(description="Sagas in flight unchanged since before are stuck")

    @classmethod
    def of(cls, page: SagaPage) -> SagaListPublic:
        return cls(
            sagas=[ListedSagaPublic.of(s, page.stuck_before) for s in page.sagas],
            next=None if page.next is None else page.next.encode(),
            stuck_before=page.stuck_before,
        )


class WindowPublic(BaseModel):
    label: str
    since: datetime
    in_flight: int
    finished: int
    compensated: int
    failed: int


class CountsPublic(BaseModel):
    stuck: int
    in_flight: int
    in_flight_by_status: dict[str, int]
    windows: list[WindowPublic] = Field(
        description="The sagas whose status last changed in the last hour and the last day, "
        "by where they are now"
    )

    @staticmethod
    def fields_of(counts: Counts) -> dict[str, Any]:
        return {
            "stuck": counts.stuck,
            "in_flight": counts.in_flight,
            "in_flight_by_status": counts.by_status,
            "windows": [
                WindowPublic(label=w.label, since=w.since, **w.counts) for w in counts.windows
            ],
        }


class VersionOverviewPublic(CountsPublic):
    version: int = Field(description="The version of the saga definition they run on")


class TypeOverviewPublic(CountsPublic):
    saga_type: str
    versions: list[VersionOverviewPublic] = Field(
        description="The same counts per version of the saga's definition, oldest first"
    )


class BucketPublic(BaseModel):
    start: datetime
    settled: dict[str, int] = Field(description="Per saga type, the sagas settled in it")
    p50_ms: float | None = Field(description="Median start-to-settled time")
    p95_ms: float | None


class OverviewPublic(BaseModel):
    at: datetime
    step_timeout_s: float
    stuck: int = Field(description="Every type's in-flight sagas past a step's deadline")
    in_flight: int
    types: list[TypeOverviewPublic]
    bucket_s: int = Field(description="Each bucket's length in seconds")
    last_hour: list[BucketPublic] = Field(description="Throughput and latency, oldest first")

    @classmethod
    def of(cls, seen: Overview) -> OverviewPublic:
        return cls(
            at=seen.at,
            step_timeout_s=seen.step_timeout_s,
            stuck=seen.stuck,
            in_flight=seen.in_flight,
            types=[
                TypeOverviewPublic(
                    saga_type=t.saga_type,
                    versions=[
                        VersionOverviewPublic(version=v.version, **CountsPublic.fields_of(v))
                        for v in t.versions
                    ],
                    **CountsPublic.fields_of(t),
                )
                for t in seen.types
            ],
            bucket_s=seen.bucket_s,
            last_hour=[
                BucketPublic(start=b.start, settled=b.settled, p50_ms=b.p50_ms, p95_ms=b.p95_ms)
                for b in seen.buckets
            ],
        )
