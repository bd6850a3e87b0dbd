"""Every decoder of untrusted bytes, fuzzed: each input accepted or refused with a one-line
reason, within a time linear in its size (faults/fuzz.py; the long run is in RELIABILITY.md).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from faults.fuzz import (
    DECODERS,
    FIXED_MS,
    PER_KIB_MS,
    REVIEW_SHAPES,
    Shape,
    filled,
    load_corpus,
    run_one,
    shapes,
)
from sagas.untrusted import MAX_RECORD_BYTES

pytestmark = pytest.mark.unit


def _assert_in_bound(decoder: str, raw: bytes) -> None:
    outcome = run_one(decoder, raw)
    assert outcome.within_bound(), (
        f"{decoder}: {outcome.ms:.1f} ms for {outcome.kib:.0f} KiB "
        f"(bound {FIXED_MS} ms + {PER_KIB_MS} ms/KiB)"
    )


@pytest.mark.parametrize("decoder", DECODERS)
@pytest.mark.parametrize("size", [64 * 1024, MAX_RECORD_BYTES])
@pytest.mark.parametrize("shape", REVIEW_SHAPES.values(), ids=REVIEW_SHAPES.keys())
def test_the_reviews_worst_shapes_are_decided_in_linear_time(
    decoder: str, size: int, shape: Shape
) -> None:
    _assert_in_bound(decoder, filled(shape, size).expand())


@pytest.mark.parametrize("decoder", DECODERS)
def test_generated_hostile_inputs_are_accepted_or_refused_within_the_bound(decoder: str) -> None:
    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(shapes(max_kib=64))
    def probe(shape: Shape) -> None:
        _assert_in_bound(decoder, shape.expand())

    probe()


CORPUS = load_corpus()


def test_the_committed_corpus_covers_every_decoder() -> None:
    assert {decoder for decoder, _ in CORPUS} == set(DECODERS)


@pytest.mark.parametrize(("decoder", "shape"), CORPUS, ids=[d for d, _ in CORPUS])
def test_the_corpus_of_the_slowest_inputs_found_stays_within_the_bound(
    decoder: str, shape: Shape
) -> None:
    _assert_in_bound(decoder, shape.expand())


def test_a_decoder_that_raises_anything_but_its_refusal_is_a_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def crashes(raw: bytes) -> None:
        raise KeyError("a bug met by a strange input")

    monkeypatch.setitem(DECODERS, "crashes", (crashes, (ValueError,)))
    with pytest.raises(KeyError):
        run_one("crashes", b"{}")


def test_a_refusal_that_is_not_one_short_line_is_a_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def multiline(raw: bytes) -> None:
        raise ValueError("first line\nsecond line")

    monkeypatch.setitem(DECODERS, "multiline", (multiline, (ValueError,)))
    with pytest.raises(AssertionError, match="not one short line"):
        run_one("multiline", b"{}")
