"""A Faust app (tests only) that shows defect 13 on the real broker: ``python -m
tests.integration.lost_seek_app <bootstrap> <topic> <result file> <reads> worker`` consumes
``topic`` (one partition, its records already in it) and, on the first record at or past
:data:`SEEK_FROM`, seeks back to 0 through the worker's own seek
(``faust_seam.seek_and_wait``) and notes every offset delivered after. Once nothing has
come for :data:`QUIET_S`, it seeks back to 0 again (what the worker's overdue reseek does),
waits as long again, writes to the result file how many offsets below :data:`SEEK_FROM`
were delivered after each seek (JSON) and exits. ``<reads>`` is ``faust`` (Faust's read
offsets, as they come) or ``worker`` (as the worker has them:
``faust_seam.deliver_every_input_record``)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from services.worker.faust_seam import deliver_every_input_record, seek_and_wait

SEEK_FROM = 500
QUIET_S = 3.0

bootstrap, name, result, reads = sys.argv[1:5]
sys.argv[1:5] = []  # the rest is Faust's command line
app = faust.App(
    name,
    broker=f"kafka://{bootstrap}",
    store="memory://",
    datadir=str(Path(result).parent / "data"),  # not the working directory
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
topic = app.topic(name, key_serializer="raw", value_serializer="raw", partitions=1)
if reads == "worker":
    deliver_every_input_record(app, [name])
after: list[list[int]] = []  # offsets delivered after the first seek, after the second
last_at = [time.monotonic()]


@app.agent(topic)
async def agent(stream: Any) -> None:
    async for event in stream.events():
        last_at[0] = time.monotonic()
        if after:
            after[-1].append(event.message.offset)
        elif event.message.offset >= SEEK_FROM:
            after.append([])
            await seek_and_wait(app, {TP(name, 0): 0})


@app.timer(interval=0.5)  # type: ignore[untyped-decorator]
async def watch() -> None:
    if not after or time.monotonic() - last_at[0] < QUIET_S:
        return
    if len(after) == 1:
        after.append([])
        last_at[0] = time.monotonic()
        await seek_and_wait(app, {TP(name, 0): 0})
        return
    below = [sorted({o for o in offsets if o < SEEK_FROM}) for offsets in after]
    with open(result, "w") as out:
        json.dump([len(b) for b in below], out)
    os._exit(0)  # done: a test app needs no orderly shutdown


if __name__ == "__main__":
    app.main()
