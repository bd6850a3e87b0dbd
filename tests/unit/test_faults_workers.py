"""The fault harness with several workers (``python -m faults --workers N``): its arguments,
which worker a worker fault hits, that a seed replays that choice, and that one worker is
the run it always was."""

import random

import pytest

from faults.cycle import Decks
from faults.inject import PROCESS_FAULTS, WORKER_FAULTS, Deck, pick_worker
from faults.report import summary
from faults.run import parse_args
from faults.stack import worker_names

pytestmark = pytest.mark.unit


def test_one_worker_unless_told_otherwise() -> None:
    args = parse_args([])
    assert (args.workers, args.cycles) == (1, 30)
    assert parse_args(["--cycles", "1", "--workers", "3"]).workers == 3


@pytest.mark.parametrize("workers", ["0", "-2", "three"])
def test_a_worker_count_below_one_or_not_a_number_is_refused(workers: str) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--workers", workers])


def test_a_worker_fault_hits_each_of_the_workers_and_no_other() -> None:
    rng = random.Random(7)
    hit = [pick_worker("kill-worker", 3, rng) for _ in range(300)]
    assert set(hit) == {0, 1, 2}
    assert min(hit.count(i) for i in range(3)) > 60  # about a third each
    assert {pick_worker("stop-worker", 3, rng) for _ in range(100)} == {0, 1, 2}
    assert {pick_worker(kind, 1, rng) for kind in WORKER_FAULTS} == {0}


def test_a_fault_of_another_kind_hits_no_worker_and_draws_nothing() -> None:
    rng = random.Random(7)
    before = rng.getstate()
    for kind in set(PROCESS_FAULTS) - set(WORKER_FAULTS):
        assert pick_worker(kind, 3, rng) is None
    assert rng.getstate() == before


def _plan(decks: Decks, workers: int, faults: int) -> list[tuple[str, int | None]]:
    kinds = [decks.process.deal() for _ in range(faults)]
    return [(k, pick_worker(k, workers, decks.workers)) for k in kinds]


def test_a_seed_replays_the_faults_and_the_workers_they_hit() -> None:
    first, again = _plan(Decks.new(1234), 3, 40), _plan(Decks.new(1234), 3, 40)
    assert first == again
    assert {w for k, w in first if k in WORKER_FAULTS} == {0, 1, 2}
    assert _plan(Decks.new(4321), 3, 40) != first


def test_a_seed_deals_the_same_faults_whatever_the_number_of_workers_and_as_before() -> None:
    one, three = _plan(Decks.new(99), 1, 40), _plan(Decks.new(99), 3, 40)
    assert [k for k, _ in one] == [k for k, _ in three]
    # The process deck draws from random.Random(seed), as it did before --workers existed.
    before = Deck(PROCESS_FAULTS, random.Random(99))
    assert [k for k, _ in one] == [before.deal() for _ in range(40)]


def test_one_worker_keeps_its_name_and_several_are_numbered() -> None:
    assert worker_names(1) == ["worker"]
    assert worker_names(3) == ["worker1", "worker2", "worker3"]


def test_the_summary_says_how_many_workers_ran() -> None:
    assert "3 worker processes" in summary([], 1, None, 3)[0]
    assert "1 worker process," in summary([], 1, None)[0]
