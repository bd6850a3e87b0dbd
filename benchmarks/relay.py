"""Baseline: a plain aiokafka relay that passes each record on ``hops`` times.

The same shape as a single-line order saga (9 sequential hops between agents), with the
same batching as the worker (take a batch, send everything, await the acks), but no state,
no validation and no decisions: what Kafka and aiokafka alone cost on this machine.
"""

from __future__ import annotations

import argparse
import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer


async def relay(bootstrap: str, topic: str, done: str, hops: int) -> None:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=f"{topic}-relay", auto_offset_reset="earliest"
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=1
    )
    await consumer.start()
    await producer.start()
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=5, max_records=200)
            futures = []
            for records in batch.values():
                for r in records:
                    hop, _, body = r.value.partition(b"|")
                    n = int(hop) + 1
                    target = done if n >= hops else topic
                    futures.append(await producer.send(target, b"%d|%s" % (n, body), key=r.key))
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--done", required=True)
    parser.add_argument("--hops", type=int, default=9)
    args = parser.parse_args()
    asyncio.run(relay(args.bootstrap, args.topic, args.done, args.hops))
