"""Synchronous patterns: one confirmed publish at a time, and Basic.Get polling, with pika.

    .venv/bin/python bench/bench_sync.py              # needs the local stack up
    .venv/bin/python bench/bench_sync.py --messages 2000 --rabbitmq

Many applications publish one message and wait for its confirm, or poll a queue with
Basic.Get. Their rate is one over the latency of one round trip, so this prints latencies
(p50/p99, ms) of:

* **confirmed publish**: pika's ``basic_publish`` on a channel in confirm mode (it returns once
  Basic.Ack arrives), 100-byte persistent messages to one queue;
* **raw send**: pulsar-client's synchronous ``send`` of the same bytes to a topic with a
  subscription: what Pulsar itself takes to persist one message (the floor for any gateway);
* **Basic.Get**: ``basic_get`` + ``basic_ack`` on a queue holding messages (each get finds one
  ready), the messages published beforehand;
* the same two AMQP figures on a private RabbitMQ node (``--rabbitmq``, Debian's
  rabbitmq-server).

Issue 34's goals: confirmed publish p50 <= raw send p50 + 0.5 ms, Basic.Get p50 <= 0.5 ms.
On a shared machine, ``--runs 3`` repeats the gateway and raw figures (one gateway process, a
fresh queue each run) and prints each run's differences and their median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pika

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_gateway_vs_pulsar as gvp  # noqa: E402
import rabbitmq  # noqa: E402

BODY = b"x" * 100
WARMUP = 50


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{statistics.median(ordered):.2f} / {p99:.2f}"


def timed(count: int, one: Callable[[], object]) -> list[float]:
    """Milliseconds per call of ``one``, after ``WARMUP`` calls not counted."""
    for _ in range(WARMUP):
        one()
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        one()
        samples.append(1000 * (time.perf_counter() - started))
    return samples


def amqp_figures(port: int, count: int) -> tuple[list[float], list[float]]:
    """(confirmed publish ms, Basic.Get + ack ms) through an AMQP server on ``port``."""
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    queue = f"sync-{uuid.uuid4().hex[:8]}"
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    publishes = timed(count, lambda: channel.basic_publish("", queue, BODY, persistent))

    empties = 0

    def get_one() -> None:
        # Every message is ready before the first Get: RabbitMQ never answers Get-Empty here.
        nonlocal empties
        while (method := channel.basic_get(queue)[0]) is None:
            empties += 1
        channel.basic_ack(method.delivery_tag)

    gets = timed(count, get_one)
    if empties:
        print(f"{port}: {empties} Get-Empty answers with messages ready")
    channel.queue_delete(queue)
    connection.close()
    return publishes, gets


def raw_sends(broker_url: str, namespace: str, count: int) -> list[float]:
    import pulsar

    client = pulsar.Client(broker_url, logger=gvp._quiet_pulsar_logger())
    try:
        topic = f"persistent://public/{namespace}/raw-sync-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "raw", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        samples = timed(count, lambda: producer.send(BODY))
        consumer.close()
        return samples
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000, help="timed calls of each kind")
    parser.add_argument("--rabbitmq", action="store_true", help="also a private RabbitMQ")
    parser.add_argument("--runs", type=int, default=1, help="gateway and raw runs, alternating")
    gvp.add_gateway_switches(parser)
    args = parser.parse_args(argv)
    stack = gvp.load_stack()
    if not stack.is_up():
        print("the local stack is not up: python3 scripts/stack.py up", file=sys.stderr)
        return 2
    broker, web, zookeeper = stack.BROKER_URL, stack.WEB_URL, stack.ZOOKEEPER
    print(f"machine: {gvp.machine_line()}")
    rows: list[tuple[str, str]] = []
    runs: list[tuple[list[float], list[float], list[float]]] = []
    with (
        gvp.fresh_namespace(web, zookeeper) as namespace,
        gvp.gateway_process(
            broker, web, zookeeper, namespace, extra_conf=gvp.gateway_conf(args)
        ) as gateway,
    ):
        for _ in range(args.runs):
            publishes, gets = amqp_figures(gateway.port, args.messages)
            runs.append((publishes, gets, raw_sends(broker, namespace, args.messages)))
    if args.runs > 1:
        print("\nrun: confirmed publish p50 - raw send p50 / Basic.Get + ack p50, ms")
        overs = [statistics.median(p) - statistics.median(r) for p, _, r in runs]
        get_p50s = [statistics.median(g) for _, g, _ in runs]
        for number, (over, get) in enumerate(zip(overs, get_p50s, strict=True), 1):
            print(f"  {number}: {over:+.2f} / {get:.2f}")
        print(f"  median: {statistics.median(overs):+.2f} / {statistics.median(get_p50s):.2f}")
    publishes, gets, raw = runs[-1]
    rows += [
        ("gateway confirmed publish", percentiles(publishes)),
        ("raw pulsar-client send", percentiles(raw)),
        ("gateway Basic.Get + ack", percentiles(gets)),
    ]
    over_raw = statistics.median(publishes) - statistics.median(raw)
    if args.rabbitmq:
        with rabbitmq.local_rabbitmq() as node:
            rabbit_publishes, rabbit_gets = amqp_figures(node.port, args.messages)
        rows += [
            ("RabbitMQ confirmed publish", percentiles(rabbit_publishes)),
            ("RabbitMQ Basic.Get + ack", percentiles(rabbit_gets)),
        ]
    last = " (the last run)" if args.runs > 1 else ""
    print(f"\n{args.messages} calls each, 100-byte persistent messages; ms p50 / p99{last}")
    print("| | p50 / p99 ms |\n|---|---|")
    for name, figures in rows:
        print(f"| {name} | {figures} |")
    print(f"\nconfirmed publish p50 - raw send p50: {over_raw:+.2f} ms (goal <= +0.5)")
    print(f"Basic.Get + ack p50: {statistics.median(gets):.2f} ms (goal <= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
