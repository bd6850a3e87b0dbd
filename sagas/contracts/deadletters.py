"""The records of the dead-letter and re-drive topics: plain JSON values, not envelopes.

The worker and the projector write a dead letter (``services/worker/deadletter.py``) for a
record they cannot process; ``sagaline deadletters redrive`` writes a re-drive record
(``services/deadletters.py``). These models describe those values as they are on the wire,
for the AsyncAPI document; ``tests/unit/test_deadletter.py`` checks what the writers write
against them. They are not :class:`~sagas.messages.Message` contracts: nothing wraps them
in an envelope, and no process decides on them.
"""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

_PART = (
    "The original record's {part}: its text when it is UTF-8, else base64 after a `base64:` "
    "prefix; null when the record had none or when it is not carried inline"
)


class DeadLetterBody(BaseModel):
    """A record a component gave up on, parked with the reason: never dropped. The original
    key and value are carried inline while their JSON form fits
    ``SAGALINE_DEADLETTER_INLINE_MAX_BYTES``; beyond that they are named by size and SHA-256
    and stay readable in ``source_topic`` at ``partition`` and ``offset``."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="DeadLetter")

    source_topic: str
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    key: str | None = Field(description=_PART.format(part="key"))
    key_inline: bool | None = Field(
        None, description="Absent when the record had no key; false: `key` is null, fetch it"
    )
    key_size: int | None = Field(None, ge=0, description="Bytes; absent when there is no key")
    key_sha256: str | None = Field(None, pattern="^[0-9a-f]{64}$")
    value: str | None = Field(description=_PART.format(part="value"))
    value_inline: bool | None = Field(
        None, description="Absent when the record had no value; false: `value` is null"
    )
    value_size: int | None = Field(None, ge=0)
    value_sha256: str | None = Field(None, pattern="^[0-9a-f]{64}$")
    reason: str = Field(max_length=1000, description="Why it was parked (bounded)")
    stage: str = Field(
        description="Which component gave up: a process's channel (`order-saga`...), "
        "`projector`, `rebuild`"
    )
    dead_lettered_at: datetime


class RedriveRecord(BaseModel):
    """One re-drive of a dead letter: its original record sent again to its source topic and
    partition. Keyed by the letter's source position ``<topic>:<partition>:<offset>`` on a
    compacted topic, so the latest re-drive of each record is kept."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="Redrive")

    letter_offset: int = Field(ge=0, description="The letter's offset on the dead-letter topic")
    partition: int = Field(ge=0, description="Where the re-sent record landed")
    offset: int = Field(ge=0)
    forced: bool = Field(description="The record had been re-driven before (`--force`)")
    redriven_at: datetime
