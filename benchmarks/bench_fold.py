"""The derived fold's cost beside the hand-written folds it replaced (issue 26).

    python -m benchmarks.bench_fold [--orders 20000] [--rounds 15]

Folds every event of a generated shop history (:func:`tests.spark.history.order_history`:
order sagas and their products' ledger facts) into its entity's ``orders`` or
``product_stock`` row, the way the projector's hot path does (one ``fold(row, event)`` per
event, the event's payload parsed inside), once with the folds derived from the models'
columns (:func:`sagas.projections.fold.derive`) and once with copies of the hand-written
folds as they stood before (kept here only as the baseline). Each round runs both, in
alternating order; the best round of each is reported as events per second, with the cost
ratio of the two bests and the median of the rounds' ratios. Times are this process's CPU
time, not the wall clock's: the box is shared, and its load shifts between rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from benchmarks.common import machine
from sagas.contracts import ledger, orders
from sagas.messages import Envelope
from sagas.projections.declare import ReadModel
from sagas.projections.fold import derive
from sagas.projections.orders import ORDERS, OrderRow
from sagas.projections.rows import entity_id
from sagas.projections.stock import PRODUCT_STOCK, StockRow
from tests.spark.history import order_history

Fold = Callable[[Any, Envelope], Any]


def hand_order(row: OrderRow | None, event: Envelope) -> OrderRow | None:
    """``apply_order`` as it was written by hand before issue 26."""
    message = event.message()
    seq = event.sequence or 0
    if isinstance(message, orders.OrderPlaced):
        return OrderRow(
            order_id=entity_id(event),
            customer_id=message.customer_id,
            status="PENDING",
            reason=None,
            lines=message.lines,
            total=message.total,
            payment_method=message.payment_method,
            created_at=event.occurred_at,
            updated_at=event.occurred_at,
            last_sequence=seq,
        )
    if row is None:
        return None
    update: dict[str, object] = {"last_sequence": seq}
    if isinstance(message, orders.OrderStatusChanged):
        update |= {
            "status": message.status,
            "reason": message.reason,
            "updated_at": event.occurred_at,
        }
    return row.model_copy(update=update)


def hand_stock(row: StockRow | None, event: Envelope) -> StockRow | None:
    """``apply_stock`` (``latest_fact_fold`` over ledger facts) as it was before issue 26."""
    message = event.message()
    if not isinstance(message, ledger.LedgerFact):
        return row
    return StockRow(
        product_id=entity_id(event),
        on_hand=message.on_hand,
        reserved=message.reserved,
        available=message.on_hand - message.reserved,
        updated_at=event.occurred_at,
        last_sequence=event.sequence or 0,
    )


def _fold_all(streams: list[tuple[Fold, list[Envelope]]]) -> tuple[float, list[Any]]:
    started = time.process_time()
    rows = []
    for fold, events in streams:
        row = None
        for event in events:
            row = fold(row, event)
        rows.append(row)
    return time.process_time() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    by_key: dict[str, list[Envelope]] = defaultdict(list)
    for event in order_history(args.orders, products=200, seed=26):
        by_key[event.key].append(event)
    models: dict[str, ReadModel[Any]] = {m.entity_type: m for m in (ORDERS, PRODUCT_STOCK)}
    hand: dict[str, Fold] = {ORDERS.entity_type: hand_order, PRODUCT_STOCK.entity_type: hand_stock}
    derived: dict[str, Fold] = {t: derive(m) for t, m in models.items()}
    chosen = [(t, events) for key, events in by_key.items() if (t := key.split(":")[0]) in models]
    events = sum(len(e) for _, e in chosen)
    best = {"hand-written": float("inf"), "derived": float("inf")}
    ratios = []
    rows: dict[str, list[Any]] = {}
    for round_ in range(args.rounds):
        took: dict[str, float] = {}
        order = [("hand-written", hand), ("derived", derived)]
        for name, folds in order if round_ % 2 == 0 else order[::-1]:
            took[name], rows[name] = _fold_all([(folds[t], e) for t, e in chosen])
            best[name] = min(best[name], took[name])
        ratios.append(took["derived"] / took["hand-written"])
    assert rows["hand-written"] == rows["derived"], "the two folds disagree"
    print(machine())
    print(f"{events:,} events ({len(chosen):,} entities), best of {args.rounds} rounds each")
    for name, took_best in best.items():
        print(
            f"{name:>13}: {events / took_best:,.0f} events/s "
            f"({took_best * 1e6 / events:.2f} us/event)"
        )
    print(
        f"derived / hand-written cost, best against best: {best['derived'] / best['hand-written']:.3f}x"
    )
    print(
        f"derived / hand-written cost, median of the rounds' pairs: {statistics.median(ratios):.3f}x"
    )


if __name__ == "__main__":
    main()
