"""Stream queues on Pulsar: publish-to-delivery latency and a consume rate.

    .venv/bin/python bench/bench_streams.py [--messages 300] [--backlog 20000]

Needs the local stack up (``python3 scripts/stack.py up``); it is used as found, never stopped.
One gateway process (``python -m gateway.cli``) on a fresh namespace; the pika clients run in
this process.

1. **Latency**, ``--messages`` messages one at a time (the next after the previous arrived), on
   a stream read from ``next`` with prefetch 100: time from ``basic_publish`` to the delivery's
   arrival at the consumer, on one monotonic clock. Twice: published to the default exchange
   (written to the stream's log directly) and through a direct exchange the stream is bound to
   (kept by the stream's subscription, appended to the log by the namespace's leader).
2. **Consume rate**: ``--backlog`` messages of 100 bytes published (confirmed), then read from
   ``first`` with prefetch 500, acknowledging each with ``multiple`` every 100: messages/s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pika

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.fleet.processes import GatewayProcess, free_port, write_config
from tests.support.pulsar_gateway import namespace_of_its_own

WEB = "http://127.0.0.1:8080"
BROKER = "pulsar://127.0.0.1:6650"
ZOOKEEPER = "127.0.0.1:2181"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency(port: int, messages: int, *, through_exchange: bool) -> list[float]:
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    stream = f"lat-{'x' if through_exchange else 'd'}-{time.monotonic_ns()}"
    consumer.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    exchange, key = "", stream
    if through_exchange:
        exchange, key = "bench-x", "k"
        consumer.exchange_declare(exchange, "direct")
        consumer.queue_bind(stream, exchange, key)
    arrived: list[float] = []

    def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        arrived.append(time.monotonic())
        ch.basic_ack(method.delivery_tag)

    consumer.basic_qos(prefetch_count=100)
    consumer.basic_consume(stream, on_message, arguments={"x-stream-offset": "next"})
    consumer.connection.process_data_events(time_limit=0.2)
    samples: list[float] = []
    for n in range(messages + 10):  # 10 unmeasured first
        sent = time.monotonic()
        publisher.basic_publish(exchange, key, f"m{n}".encode())
        deadline = sent + 30
        while len(arrived) <= n:
            consumer.connection.process_data_events(time_limit=0.0005)
            if time.monotonic() > deadline:
                raise SystemExit(f"message {n} did not arrive")
        if n >= 10:
            samples.append((arrived[n] - sent) * 1000)
    consumer.connection.close()
    publisher.connection.close()
    return samples


def consume_rate(port: int, backlog: int) -> tuple[float, float]:
    channel = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    stream = f"rate-{time.monotonic_ns()}"
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.confirm_delivery()
    body = b"x" * 100
    started = time.monotonic()
    for _ in range(backlog):
        channel.basic_publish("", stream, body)
    published = backlog / (time.monotonic() - started)
    got = 0

    def on_message(ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        nonlocal got
        got += 1
        if got % 100 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)

    channel.basic_qos(prefetch_count=500)
    started = time.monotonic()
    channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
    while got < backlog:
        channel.connection.process_data_events(time_limit=0.05)
        if time.monotonic() - started > 300:
            raise SystemExit(f"read {got} of {backlog}")
    rate = backlog / (time.monotonic() - started)
    channel.connection.close()
    return published, rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--backlog", type=int, default=20_000)
    args = parser.parse_args()
    with (
        httpx.Client(base_url=WEB, timeout=30) as admin,
        namespace_of_its_own(admin, ZOOKEEPER, "public") as namespace,
        tempfile.TemporaryDirectory() as directory,
    ):
        port = free_port()
        config = write_config(
            Path(directory),
            port=port,
            namespace=namespace,
            zookeeper=ZOOKEEPER,
            web_url=WEB,
            broker_url=BROKER,
        )
        gateway = GatewayProcess("bench", config, port).start().wait_ready()
        try:
            for through_exchange in (False, True):
                samples = latency(port, args.messages, through_exchange=through_exchange)
                path = (
                    "via a direct exchange (leader feed)"
                    if through_exchange
                    else "default exchange"
                )
                print(
                    f"latency publish->deliver, {path}: {len(samples)} messages, "
                    f"p50 {statistics.median(samples):.1f} ms, "
                    f"p99 {percentile(samples, 0.99):.1f} ms, max {max(samples):.1f} ms"
                )
            published, rate = consume_rate(port, args.backlog)
            print(
                f"backlog of {args.backlog} x 100 B: published {published:,.0f} msg/s (confirms), "
                f"read from first at {rate:,.0f} msg/s (prefetch 500)"
            )
        finally:
            gateway.close()


if __name__ == "__main__":
    main()
