"""The first messages to a new queue: how long their confirm and delivery take, against the
messages after them, through the gateway and with the raw pulsar-client.

    .venv/bin/python bench/bench_first_publish.py            # needs the local stack up
    .venv/bin/python bench/bench_first_publish.py --queues 10

Per queue: declare it, consume it, then publish three messages one at a time (each waits for
its confirm and its delivery). The gateway creates a queue's Pulsar producer on the first
publish to it, so the first message pays for that; the raw client's column times the same
three sends on a fresh topic with a consumer attached, the producer's creation included in
the first. This is what made `bench_gateway_vs_pulsar.py`'s latency p99 when its trickle
measured from the 21st message (docs/benchmarks.md, "Latency: the first publish to a new
queue").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_gateway_vs_pulsar as gvp  # noqa: E402
from pamqp import commands  # noqa: E402

MESSAGES_PER_QUEUE = 3


async def gateway_times(port: int, queues: int) -> list[list[tuple[float, float]]]:
    """(confirm ms, deliver ms) of each message of each fresh queue."""
    publisher = await gvp.AmqpClient.open("127.0.0.1", port)
    consumer = await gvp.AmqpClient.open("127.0.0.1", port)
    try:
        await publisher.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        await consumer.call(commands.Basic.Qos(prefetch_count=10), commands.Basic.QosOk)
        delivered = asyncio.Event()

        def on_delivery(tag: int, _head: bytes) -> None:
            consumer.ack(tag)
            delivered.set()

        consumer.on_delivery = on_delivery
        published = 0
        results = []
        for n in range(queues):
            queue = f"first-{n}"
            await publisher.call(
                commands.Queue.Declare(queue=queue, durable=True), commands.Queue.DeclareOk
            )
            await consumer.call(
                commands.Basic.Consume(queue=queue, consumer_tag=queue), commands.Basic.ConsumeOk
            )
            times = []
            for _ in range(MESSAGES_PER_QUEUE):
                delivered.clear()
                started = time.perf_counter()
                publisher.write(publisher.message_frames(queue, b"x" * 100))
                published += 1
                await publisher.wait_confirmed(published, time.monotonic() + 30)
                confirmed = time.perf_counter()
                await asyncio.wait_for(delivered.wait(), 30)
                times.append((1000 * (confirmed - started), 1000 * (time.perf_counter() - started)))
            results.append(times)
        return results
    finally:
        await consumer.close()
        await publisher.close()


def raw_times(broker_url: str, namespace: str, queues: int) -> list[list[tuple[float, float]]]:
    import pulsar

    client = pulsar.Client(broker_url, logger=gvp._quiet_pulsar_logger())
    try:
        results = []
        for n in range(queues):
            topic = f"persistent://public/{namespace}/first-raw-{n}"
            arrived = threading.Event()

            def listener(
                consumer: object, message: object, arrived: threading.Event = arrived
            ) -> None:
                consumer.acknowledge(message)  # type: ignore[attr-defined]
                arrived.set()

            client.subscribe(topic, "first", message_listener=listener)
            times = []
            producer = None
            for _ in range(MESSAGES_PER_QUEUE):
                arrived.clear()
                started = time.perf_counter()
                if producer is None:
                    producer = client.create_producer(topic, batching_enabled=False)
                producer.send(b"x" * 100)
                confirmed = time.perf_counter()
                if not arrived.wait(30):
                    raise RuntimeError(f"raw: nothing arrived on {topic}")
                times.append((1000 * (confirmed - started), 1000 * (time.perf_counter() - started)))
            results.append(times)
        return results
    finally:
        client.close()


def summary(name: str, results: list[list[tuple[float, float]]]) -> None:
    for index in range(MESSAGES_PER_QUEUE):
        confirms = [times[index][0] for times in results]
        delivers = [times[index][1] for times in results]
        print(
            f"| {name} | message {index + 1} | {statistics.median(confirms):.1f} "
            f"({min(confirms):.1f}-{max(confirms):.1f}) | {statistics.median(delivers):.1f} "
            f"({min(delivers):.1f}-{max(delivers):.1f}) |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", type=int, default=6, help="fresh queues (and raw topics)")
    args = parser.parse_args(argv)
    stack = gvp.load_stack()
    if not stack.is_up():
        print("the local stack is not up: python3 scripts/stack.py up", file=sys.stderr)
        return 2
    broker, web, zookeeper = stack.BROKER_URL, stack.WEB_URL, stack.ZOOKEEPER
    print(f"machine: {gvp.machine_line()}")
    with gvp.fresh_namespace(web, zookeeper) as namespace:
        with gvp.gateway_process(broker, web, zookeeper, namespace) as gateway:
            through_gateway = asyncio.run(gateway_times(gateway.port, args.queues))
        raw = raw_times(broker, namespace, args.queues)
    print(f"\n{args.queues} fresh queues; median (min-max) ms")
    print("| | | publish→confirm | publish→deliver |\n|---|---|---|---|")
    summary("gateway", through_gateway)
    summary("raw pulsar-client", raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
