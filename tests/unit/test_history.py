"""A key's history: the map its readers see, and the chunks it is stored in.

What the worker relies on (services/worker/runner.py): a record's writes (new chunks,
deletions of chunks no longer read, then the record) leave, cut after any of them, a table
from which the key decodes to exactly the state before or the state after; and the table
holds a bounded number of chunks per history whatever its length.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.settings import Settings
from sagaline.wiring import build_processes
from sagas.contracts.ledger import SetCapacity
from sagas.machinery.history import CHUNK, PARTIAL, History, HistoryError, is_chunk_key
from sagas.machinery.record import Record, _history_paths
from sagas.messages import ContractError, Envelope
from tests.unit.helpers import envelope


class Counted(BaseModel):
    model_config = ConfigDict(frozen=True)
    log: History[int] = Field(default_factory=History)


CODEC = Record.codec(Counted)


def store(table: dict[str, bytes], writes: list[tuple[str, bytes | None]]) -> None:
    for key, value in writes:
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


def decode(table: dict[str, bytes], key: str = "k") -> Record[Any]:
    return CODEC.decode(key, table[key], table.get)


def test_it_reads_as_the_ordered_map_it_was_built_as() -> None:
    log: History[int] = History()
    for n, name in enumerate("abcab"):
        log = log.put(name, n)
    assert list(log.items()) == [("c", 2), ("a", 3), ("b", 4)]  # a key put again moves last
    assert log == {"a": 3, "b": 4, "c": 2} and "a" in log and "z" not in log
    assert log.prune(keep=2) == {"a": 3, "b": 4}
    assert log.prune(lambda v: v < 3) == {"a": 3, "b": 4}
    assert log.prune(lambda v: v == 3) is log  # a prefix only: c (2) is first, not expired


@pytest.mark.parametrize("seed", range(6))
def test_random_histories_match_a_plain_map_and_every_cut_write_decodes_before_or_after(
    seed: int,
) -> None:
    rng = random.Random(seed)
    model: OrderedDict[str, int] = OrderedDict()
    record: Record[Any] = CODEC(state=Counted())
    stored: Record[Any] | None = None
    table: dict[str, bytes] = {}
    for n in range(1500):
        log: History[int] = record.state.log
        roll = rng.random()
        if roll < 0.75:  # a new key, or an old one again (moved last)
            name = f"e{rng.randrange(400)}" if rng.random() < 0.2 else f"n{n}"
            log = log.put(name, n)
            model.pop(name, None)
            model[name] = n
        elif roll < 0.9:
            keep = rng.randrange(1, 300)
            log = log.prune(keep=keep)
            while len(model) > keep:
                model.popitem(last=False)
        else:
            floor = n - rng.randrange(50, 400)
            log = log.prune(lambda v, floor=floor: v < floor)
            while model and next(iter(model.values())) < floor:
                model.popitem(last=False)
        record = record.model_copy(update={"state": Counted(log=log)})
        assert list(log.items()) == list(model.items())
        if rng.random() < 0.3:  # a batch ends: the record is stored
            new, writes = record.writes("k", stored)
            assert writes[-1][0] == "k"  # the record itself comes last
            for cut in range(len(writes)):  # a crash after `cut` of the writes
                partial = dict(table)
                store(partial, writes[:cut])
                if stored is None:
                    assert "k" not in partial
                else:
                    assert list(decode(partial).state.log.items()) == list(stored.state.log.items())
            store(table, writes)
            stored = decode(table)
            assert list(stored.state.log.items()) == list(model.items())
            assert stored.encode() == new.encode()
            record = new
            chunks = [k for k in table if is_chunk_key(k)]
            live = len(model) // CHUNK + 2
            assert len(chunks) <= 2 * live + 8  # dropped chunks are deleted, not kept


def test_the_record_written_each_batch_holds_only_the_tail() -> None:
    record: Record[Any] = CODEC(state=Counted())
    table: dict[str, bytes] = {}
    stored = None
    sizes = []
    for n in range(3000):
        record = record.model_copy(
            update={"state": Counted(log=record.state.log.put(f"{n:032x}", n))}
        )
        if n % 7 == 0:
            record, writes = record.writes("k", stored)
            store(table, writes)
            stored = record
            sizes.append(len(table["k"]))
    assert stored is not None and len(stored.state.log) == 2997  # the last write, at 2996
    assert max(sizes) < CHUNK * 60  # under CHUNK entries of ~50 bytes, whatever the length
    assert decode(table).state.log == stored.state.log


def test_a_record_stored_inline_before_chunks_reads_and_is_chunked_on_its_next_write() -> None:
    old = b'{"state": {"log": {"a": 1, "b": 2}}, "seen": ["m1", "m2"], "sequence": 2}'
    record = CODEC.model_validate_json(old)  # no table needed: nothing is in chunks yet
    assert list(record.seen) == ["m1", "m2"] and record.state.log == {"a": 1, "b": 2}
    log = record.state.log
    for n in range(3 * CHUNK):
        log = log.put(f"x{n}", n)
    record = record.model_copy(update={"state": Counted(log=log)})
    _, writes = record.writes("k", CODEC.model_validate_json(old))
    assert sum(is_chunk_key(k) for k, _ in writes) == 3  # the old entries too, sealed now
    table: dict[str, bytes] = {}
    store(table, writes)
    assert decode(table).state.log == log


def test_a_missing_chunk_is_a_readable_error() -> None:
    log: History[int] = History()
    for n in range(2 * CHUNK):
        log = log.put(str(n), n)
    _, writes = CODEC(state=Counted(log=log)).writes("k", None)
    table: dict[str, bytes] = {}
    store(table, writes)
    del table[next(k for k in table if is_chunk_key(k))]
    with pytest.raises(ValidationError, match="chunk 0 is missing from the table"):
        decode(table)
    with pytest.raises(ValidationError, match="stored in chunks; decode it with its table"):
        CODEC.model_validate_json(table["k"])


def test_a_partial_decode_reads_the_tail_and_refuses_to_change() -> None:
    log: History[int] = History()
    for n in range(2 * CHUNK + 3):
        log = log.put(str(n), n)
    _, writes = CODEC(state=Counted(log=log)).writes("k", None)
    partial = CODEC.model_validate_json(dict(writes)["k"], context={PARTIAL: True})
    assert list(partial.state.log) == [str(n) for n in range(2 * CHUNK, 2 * CHUNK + 3)]
    with pytest.raises(HistoryError, match="decoded without its chunks"):
        partial.state.log.put("x", 1)


def test_a_chunk_key_can_never_be_an_envelope_key() -> None:
    good = envelope(SetCapacity(on_hand=1), key="p1")
    Envelope.decode(good.encode())
    with pytest.raises(ContractError, match="control characters"):
        Envelope.decode(good.encode().replace(b'"p1"', b'"p1\\u001fseen/0"'))


def test_every_process_record_finds_its_histories_by_declaration() -> None:
    """The runner writes the chunks of the histories a record type declares: each process's
    record type must declare where they are (a history in a field typed otherwise would be
    stored inline, whole, again)."""
    settings = Settings(cdc_enabled=True)
    paths = {p.name: _history_paths(Record.codec(p.state_type)) for p in build_processes(settings)}
    assert all(("seen",) in found for found in paths.values())
    assert paths["inventory"] == (("state", "closed"), ("seen",))
    assert paths["course"] == (("state", "seats", "closed"), ("seen",))
    assert paths["student"] == (("state", "closed"), ("seen",))


def test_two_histories_of_one_name_in_a_record_are_refused() -> None:
    class Twice(BaseModel):
        inner: Counted = Field(default_factory=Counted)
        log: History[int] = Field(default_factory=History)

    with pytest.raises(TypeError, match="two histories share a name"):
        _history_paths(Record.codec(Twice))


def test_a_chunk_whose_entries_were_all_put_again_is_still_written() -> None:
    log: History[int] = History()
    for n in range(3 * CHUNK):  # chunks 0, 1, 2 sealed; the keys of chunk 1 put again below
        log = log.put(f"k{n}", n)
    for n in range(CHUNK, 2 * CHUNK):
        log = log.put(f"k{n}", 1000 + n)
    _, writes = CODEC(state=Counted(log=log)).writes("k", None)
    table: dict[str, bytes] = {}
    store(table, writes)
    assert table["k\x1flog/1"] == b"[]"  # nothing live in it, but a reader loads it
    assert decode(table).state.log == log


def test_a_retirement_then_a_deletion_cut_at_any_write_leave_the_key_retired_or_not() -> None:
    """A final record becomes its marker (a write like any other), then the marker and every
    chunk its record sealed are deleted: cut after any write, the key decodes to what it
    was or to what it became, or is absent once the marker's own tombstone is written."""
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    for entries in (5, 2 * CHUNK + 3, 5 * CHUNK):
        log: History[int] = History()
        for n in range(entries):
            log = log.put(f"n{n}", n)
        table: dict[str, bytes] = {}
        final, writes = CODEC(state=Counted(log=log)).writes("k", None)
        store(table, writes)
        marker = final.marker(Counted(), now, now)
        assert marker.state.log.leftover_chunks() == final.state.log.leftover_chunks()
        marker, writes = marker.writes("k", final)
        for cut in range(len(writes) + 1):  # the retirement, cut after `cut` writes
            partial = dict(table)
            store(partial, writes[:cut])
            got = decode(partial)
            assert got == (marker if cut == len(writes) else final)
        store(table, writes)
        deletes = decode(table).deletes("k")
        assert deletes[-1] == ("k", None)  # the marker's own tombstone comes last
        for cut in range(len(deletes) + 1):  # the deletion, cut after `cut` writes
            partial = dict(table)
            store(partial, deletes[:cut])
            if cut < len(deletes):
                assert decode(partial) == marker  # it reads no chunk
            else:
                assert partial == {}  # no chunk is left behind
