"""What one decision sent, recorded and replayed, compared: the differences a replay reports.

A message is compared by everything a consumer acts on (channel, key, type, payload, saga,
cause, reply channel, entity and sequence), not by when it was sent: a batch decided again
after a crash sends the same messages later. Each difference is named by its kind only
(``missing ledger.Cancel``, ``payment.Authorized -> payment.Declined``), so that diverging
decisions group by it; the messages themselves are the example shown beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from sagas.messages import Envelope


@dataclass(frozen=True)
class Sent:
    """One message a decision sent: on a process channel, or on ``events`` (a fact)."""

    channel: str
    envelope: Envelope

    @cached_property
    def content(self) -> tuple[Any, ...]:
        e = self.envelope  # both sides' payloads hold JSON values: dicts compare as they are
        return (
            self.channel, e.key, e.type, e.payload, e.saga_id, e.causation_id, e.reply_to,
            e.entity_type, e.sequence,
        )  # fmt: skip

    @property
    def message_id(self) -> str:
        return self.envelope.message_id

    @property
    def type(self) -> str:
        return self.envelope.type

    @property
    def at(self) -> datetime:
        return self.envelope.occurred_at

    def brief(self) -> dict[str, Any]:
        """The message as a report shows it."""
        e = self.envelope
        shown: dict[str, Any] = {
            "channel": self.channel,
            "type": e.type,
            "key": e.key,
            "id": e.message_id,
        }
        if e.sequence is not None:
            shown["sequence"] = e.sequence
        return {**shown, "payload": e.payload}


def differences(recorded: Sequence[Sent], replayed: Sequence[Sent]) -> list[str]:
    """What differs between a decision's recorded and replayed messages, by kind, in order:
    each replayed message is paired with the recorded one it equals (same id, then same
    content under another id), then with the one of its id, then with one of its channel,
    type and key; what is left is missing (recorded only) or extra (replayed only). A
    message sent under another id comes last: it follows from one missing or added.
    ``recorded`` may hold several versions of one id (sent again after a crash): a replayed
    message equal to any of them is equal."""
    left = list(recorded)
    found: list[str] = []
    unpaired: list[Sent] = []
    for sent in replayed:
        twin = _take(
            left, lambda r, s=sent: r.message_id == s.message_id and r.content == s.content
        )
        if twin is None:
            unpaired.append(sent)
        else:  # other versions of the same id are matched too
            left = [r for r in left if r.message_id != sent.message_id]
    rest: list[Sent] = []
    renamed: list[str] = []
    for sent in unpaired:
        if (twin := _take(left, lambda r, s=sent: r.content == s.content)) is not None:
            renamed.append(f"{sent.type} sent under another id")
        elif (twin := _take(left, lambda r, s=sent: r.message_id == s.message_id)) is not None:
            found.append(_changed(twin, sent))
        else:
            rest.append(sent)
    for sent in rest:
        if (twin := _take(left, lambda r, s=sent: _same_slot(r, s))) is not None:
            found.append(_changed(twin, sent))
        else:
            found.append(f"extra {sent.type}")
    seen: set[str] = set()
    for r in left:
        if r.message_id not in seen:
            seen.add(r.message_id)
            found.append(f"missing {r.type}")
    return found + renamed  # a message missing or added moves the ids of those after it


def unique(recorded: Iterable[Sent]) -> list[Sent]:
    """One version per message id (the first), for display."""
    seen: dict[str, Sent] = {}
    for sent in recorded:
        seen.setdefault(sent.message_id, sent)
    return list(seen.values())


def _take(left: list[Sent], matches: Any) -> Sent | None:
    for i, candidate in enumerate(left):
        if matches(candidate):
            del left[i]
            return candidate
    return None


def _same_slot(a: Sent, b: Sent) -> bool:
    return (a.channel, a.envelope.key, a.type) == (b.channel, b.envelope.key, b.type)


def _changed(recorded: Sent, replayed: Sent) -> str:
    if recorded.type != replayed.type:
        return f"{recorded.type} -> {replayed.type}"
    fields = [
        name
        for name, a, b in zip(_FIELDS, recorded.content, replayed.content, strict=True)
        if a != b and name != "payload"
    ]
    mine, theirs = recorded.envelope.payload, replayed.envelope.payload
    fields += [
        f"payload.{k}" for k in sorted(mine.keys() | theirs.keys()) if mine.get(k) != theirs.get(k)
    ]
    return f"{recorded.type} differs ({', '.join(fields)})"


_FIELDS = (
    "channel", "key", "type", "payload", "saga_id", "causation_id", "reply_to",
    "entity_type", "sequence",
)  # fmt: skip
