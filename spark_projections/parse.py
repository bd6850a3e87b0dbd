"""Kafka records -> well-formed domain events, or rejects with the projector's reason.

Which records are well-formed is decided by the online projector's own
:func:`readside.triage.triage` (envelope and payload contracts, domain-event
metadata, record key, column limits). Running it in Python on every record would cost most
of the time budget, so each record first goes through native checks (:func:`vouched`) that
accept it only when the projector certainly would, with the very values Spark parsed:

- the text matches its type's skeleton (:func:`spark_projections.contract.skeleton`): it is
  exactly what ``Envelope.encode()`` writes, key for key and token for token, with no
  escape, whitespace, extra or missing key;
- every field satisfies its contract (:mod:`spark_projections.contract`), the key names the
  entity, and the event fits the columns (:mod:`spark_projections.limits`).

Everything else -- malformed records, unknown types, anything written differently -- is
rare and goes through ``triage`` itself, one record at a time (:func:`exact_verdicts`). The
native checks may be incomplete (sending a valid record the slow way), never unsound; the
golden-record tests compare both routes on every kind of bad record.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from sagas.messages import SCHEMA_VERSION, Envelope
from sagas.projections.entity import is_known
from spark_projections import contract, limits

ENVELOPE_COLUMNS = tuple(f"e_{name}" for name in contract.ENVELOPE_FIELDS[:-1])
"""The envelope's fields but the payload, as flat columns (``e_message_id``...)."""

EVENT_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "message_id",
    "entity_key",
    "sequence",
    "definition_version",
    "type",
    "known",
    "saga_id",
    "causation_id",
    "reply_to",
    "occurred_at",
    "p",
    "envelope",
    "fast",
    "key",
    "value",
)
"""What the gate and the models see of a record. An event: where it sits, the envelope
fields the models and its stored form need, its payload ``p``
(:func:`spark_projections.contract.payload_schema`), ``occurred_at`` as a timestamp, and
``envelope``, its stored form when it took the exact route (a vouched event's stored form
is rebuilt from its fields, :func:`stored_text`). A record the native checks did not
vouch for (``fast`` false) keeps its raw ``key`` and ``value`` and nothing else until the
exact route has triaged it."""

_VERDICT = StructType(
    [
        StructField("reason", StringType()),
        StructField("envelope", StringType()),
        StructField("normalized", StringType()),
        StructField("letter", StringType()),
        # Why the projector also dead-letters an event it accepts (an unknown type).
    ]
)


def parsed(records: DataFrame, text: Column | None = None) -> DataFrame:
    """Adds ``text`` and the envelope's fields (``e_*``), payload ``p``, ``occurred_at``."""
    source = F.col("value").cast("string") if text is None else text
    with_text = records.withColumn("text", source)
    return (
        with_text.withColumn("_env", F.from_json("text", _envelope_schema()))
        .select(
            "*",
            *[F.col(f"_env.{c[2:]}").alias(c) for c in ENVELOPE_COLUMNS],
            F.col("_env.payload").alias("p"),
        )
        .drop("_env")
        # Null for a time that is no time (ANSI mode: to_timestamp would fail the job).
        .withColumn("occurred_at", F.try_to_timestamp(F.col("e_occurred_at")))
        .withColumn("known", F.col("e_type").isin(*sorted(contract.known_types())))
    )


def with_verdict(records: DataFrame) -> DataFrame:
    """Parsed records with ``fast``: true when the native checks vouch for the record."""
    return parsed(records).withColumn("fast", F.coalesce(vouched(), F.lit(False)))


def records_as_events(verdicts: DataFrame) -> DataFrame:
    """Every record as :data:`EVENT_COLUMNS`: vouched ones as events; the others with their
    raw key and value only (no entity: they stay out of every entity's sequence until the
    exact route has triaged them)."""
    fast = F.col("fast")
    event = {name: F.when(fast, F.col(f"e_{name}")) for name in _ENVELOPE_PART}
    return verdicts.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        *[column.alias(name) for name, column in event.items()],
        F.when(fast, F.col("e_key")).alias("entity_key"),
        F.when(fast, F.col("e_sequence").try_cast("int")).alias("sequence"),
        F.when(fast, F.col("e_type")).alias("type"),
        F.when(fast, F.col("known")).alias("known"),
        F.when(fast, F.col("occurred_at")).alias("occurred_at"),
        F.when(fast, F.col("p")).alias("p"),
        F.lit(None).cast("string").alias("envelope"),
        "fast",
        F.when(~fast, F.col("key")).alias("key"),
        F.when(~fast, F.col("value")).alias("value"),
    ).select(*EVENT_COLUMNS)


_ENVELOPE_PART = ("message_id", "saga_id", "causation_id", "reply_to", "definition_version")


def exact_verdicts(records: DataFrame) -> DataFrame:
    """The projector's triage of every record the native checks did not vouch for. The
    filter sits below the Python function, so vouched records never reach Python."""
    others = records.where(~F.col("fast")).select(
        "topic", "partition", "offset", "timestamp", "key", "value"
    )
    # A plain (pickled) Python UDF, said so: Spark 4.2 asks for an Arrow-optimized one by
    # default, which needs pyarrow and pandas (not installed: it falls back, with warnings)
    # and coerces returned values by other rules.
    triage = F.udf(_triage, _VERDICT, useArrow=False)
    return others.withColumn("verdict", triage("key", "value"))


def exact_events(exact: DataFrame) -> DataFrame:
    """Records ``triage`` accepted, as events parsed from their normalized form (payload as
    validated: what the folds see), with the envelope as the projector stores it."""
    accepted = exact.where(F.col("verdict.reason").isNull())
    parsed_again = parsed(accepted, F.col("verdict.normalized"))
    return parsed_again.select(
        "topic",
        "partition",
        "offset",
        "timestamp",
        *[F.col(f"e_{name}").alias(name) for name in _ENVELOPE_PART],
        F.col("e_key").alias("entity_key"),
        F.col("e_sequence").try_cast("int").alias("sequence"),
        F.col("e_type").alias("type"),
        "known",
        "occurred_at",
        "p",
        F.col("verdict.envelope").alias("envelope"),
        F.lit(True).alias("fast"),
        F.lit(None).cast("binary").alias("key"),
        F.lit(None).cast("binary").alias("value"),
    ).select(*EVENT_COLUMNS)


def rejects(exact: DataFrame) -> DataFrame:
    """``rebuild_rejects`` rows: where the record sits, the projector's reason, the value."""
    letter = F.coalesce(F.col("verdict.reason"), F.col("verdict.letter"))
    return exact.where(letter.isNotNull()).select(
        "topic",
        "partition",
        "offset",
        letter.alias("reason"),
        raw_text(F.col("value")).alias("raw"),
    )


def raw_text(value: Column) -> Column:
    """A record's value as text when it is UTF-8, else ``base64:...`` (as dead letters
    write it), so a reject keeps its bytes whatever they are."""
    text = value.cast("string")
    utf8 = F.encode(text, "UTF-8") == value
    return F.when(utf8, text).otherwise(F.concat(F.lit("base64:"), F.base64(value)))


def stored_text() -> Column:
    """The event as the projector stores it (``Envelope.encode()``): the exact route's
    envelope, or a vouched event's fields written compactly in contract order. That equals
    its text, which matched the skeleton (the time in pydantic's UTC form, the entity type
    the key's prefix): only held events need it, so the text is not carried along."""
    return F.coalesce(F.col("envelope"), _compact_text())


def _envelope_schema() -> StructType:
    fields = contract.envelope_schema().fields[:-1]
    return StructType([*fields, StructField("payload", contract.payload_schema())])


# --- the native verdict ------------------------------------------------------------------


def vouched() -> Column:
    return (
        # Invalid UTF-8 decodes to U+FFFD. `contains`, not `instr`: it compares only where
        # the first byte matches, `instr` at every character (the whole text, every record).
        ~F.col("text").contains("\ufffd")
        & _skeleton_matches()
        & F.col("p").isNotNull()
        & F.col("occurred_at").isNotNull()  # a 30th of February, an hour 24...
        & _domain_event()
        & _record_key_matches()
        & _payload_valid()
        & limits.fits()
    )


def _skeleton_matches() -> Column:
    return _by_type(lambda spec: F.col("text").rlike(contract.skeleton(spec.type_name)))


def _domain_event() -> Column:
    """The key names an entity of the envelope's type (``<entity_type>:<id>``), and the type
    is all of the key's prefix (what the projector folds by; it also lets a held event's
    stored text be rebuilt from its key)."""
    prefix = F.concat(F.col("e_entity_type"), F.lit(":"))
    return (
        F.col("e_key").startswith(prefix)
        & (F.col("e_key") != prefix)
        & (F.instr(F.col("e_entity_type"), ":") == 0)
    )


def _record_key_matches() -> Column:
    # A record without a key is refused by triage (it may sit on any partition), so it never
    # takes the native route; a null comparison here is false.
    return F.col("key").isNotNull() & (F.col("key") == F.encode(F.col("e_key"), "UTF-8"))


def _payload_valid() -> Column:
    """The payload satisfies its (natively covered) contract."""
    p = F.col("p")
    cases = None
    for name, spec in contract.native_contracts().items():
        checks = [contract.value_ok(contract.read_field(p, f), f) for f in spec.fields]
        fits = contract.all_true(checks) if checks else F.lit(True)
        cases = (F if cases is None else cases).when(F.col("e_type") == name, fits)
    assert cases is not None
    valid: Column = cases.otherwise(F.lit(False))
    return valid


# --- the stored text of a vouched event ---------------------------------------------------


def _by_type(
    build: Callable[[contract.PayloadContract], Column], type_column: str = "e_type"
) -> Column:
    """``build(contract)`` for the record's type; null for a type without native contract."""
    cases = None
    for name, spec in contract.native_contracts().items():
        value = build(spec)
        cases = (F if cases is None else cases).when(F.col(type_column) == name, value)
    assert cases is not None
    result: Column = cases
    return result


def _compact_text() -> Column:
    fields = {
        "message_id": F.col("message_id"),
        "type": F.col("type"),
        "schema_version": F.lit(SCHEMA_VERSION),  # the skeleton pins it
        "key": F.col("entity_key"),
        "saga_id": F.col("saga_id"),
        "causation_id": F.col("causation_id"),
        "reply_to": F.col("reply_to"),
        "occurred_at": _utc_text(F.col("occurred_at")),
        "entity_type": F.substring_index(F.col("entity_key"), ":", 1),
        "sequence": F.col("sequence"),
        "definition_version": F.col("definition_version"),
    }
    assert tuple(fields) == contract.ENVELOPE_FIELDS[:-1]
    head = F.to_json(F.struct(*[column.alias(name) for name, column in fields.items()]))
    payload = _by_type(
        lambda spec: (
            F.to_json(
                F.struct(*[contract.read_field(F.col("p"), f).alias(f.name) for f in spec.fields]),
                {"ignoreNullFields": "false"},
            )
            if spec.fields
            else F.lit("{}")
        ),
        type_column="type",
    )
    return F.concat(F.regexp_replace(head, r"\}$", ""), F.lit(',"payload":'), payload, F.lit("}"))


def _utc_text(ts: Column) -> Column:
    """A time as pydantic writes a UTC time: ``...:SS`` + ``.ffffff`` unless zero + ``Z``."""
    micros = F.unix_micros(ts) % 1_000_000
    fraction = F.when(micros == 0, F.lit("")).otherwise(
        F.concat(F.lit("."), F.date_format(ts, "SSSSSS"))
    )
    return F.concat(F.date_format(ts, "yyyy-MM-dd'T'HH:mm:ss"), fraction, F.lit("Z"))


# --- the exact route -----------------------------------------------------------------------


def _triage(
    key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None, str | None, str | None]:
    """The projector's verdict on one record (runs in a Python worker): the reason it is
    rejected, or the envelope as the projector stores it and in normalized form, and why
    the projector dead-letters it all the same (an unknown type)."""
    import sagas.catalog  # noqa: F401  (registers every contract in the worker)
    from readside.triage import Rejected, triage, unknown_type_reason

    # Spark hands binary over as bytearray; the projector sees bytes (its reasons print them).
    key = None if key is None else bytes(key)
    value = None if value is None else bytes(value)
    try:
        verdict = triage(key, value)
    except Exception as exc:  # the projector would fail on it too; never fail the rebuild
        return (f"projector cannot handle it: {type(exc).__name__}: {exc}", None, None, None)
    if isinstance(verdict, Rejected):
        return (verdict.reason, None, None, None)
    envelope, normalized = verdict.encode().decode(), _normalized(verdict).encode().decode()
    return (None, envelope, normalized, unknown_type_reason(verdict))


def _normalized(event: Envelope) -> Envelope:
    """``event`` with its payload as the folds see it (``event.message()``): lax input such
    as ``2.0`` for an int, or a number for a decimal, written the way pydantic writes it."""
    if not is_known(event):
        return event
    return event.model_copy(update={"payload": event.message().model_dump(mode="json")})
