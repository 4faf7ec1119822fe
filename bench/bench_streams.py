"""Stream queues on Pulsar: publish-to-delivery latency and a consume rate.

    .venv/bin/python bench/bench_streams.py [--messages 300] [--bind-rounds 50] [--fed 20000]
        [--backlog 20000]

Needs the local stack up (``python3 scripts/stack.py up``); it is used as found, never stopped.
One gateway process (``python -m gateway.cli``) on a fresh namespace, its metadata in a
ZooKeeper chroot of its own (so that it leads the namespace: no other run's gateway feeds its
streams); the pika clients run in this process.

1. **Latency**, ``--messages`` messages per path one at a time (the next after the previous
   arrived), on streams read from ``next`` with prefetch 100: time from ``basic_publish`` to
   the delivery's arrival at the consumer, on one monotonic clock. Two paths, measured in
   turns (a message on one, then on the other) so that a load that comes and goes on this
   shared machine weighs on both alike: published to the default exchange (written to the
   stream's log directly) and through a direct exchange the stream is bound to (kept by the
   stream's subscription, appended to the log by the namespace's leader).
1b. **First message through a new binding**, ``--bind-rounds`` times: Bind-Ok of a fresh
   routing key to the arrival of one message published with it (the publisher registers the
   key and makes its topic's subscriptions, the leader's feed starts reading the topic).
1c. **Feed rate**: ``--fed`` messages of 100 bytes published through a direct exchange without
   confirms, as fast as one pika channel goes, to a stream read from ``next`` (prefetch 500):
   the rate at which they arrive (every one appended to the log by the leader's feed).
2. **Consume rate**: ``--backlog`` messages of 100 bytes published (confirmed), then read from
   ``first`` with prefetch 500, acknowledging each with ``multiple`` every 100: messages/s.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.gateway_process import GatewayProcess, free_port, write_config
from tests.support.pulsar_gateway import namespace_of_its_own
from tests.support.zookeeper import kazoo_client

WEB = "http://127.0.0.1:8080"
BROKER = "pulsar://127.0.0.1:6650"
ZOOKEEPER = "127.0.0.1:2181"
DEFAULT, EXCHANGE = "d", "x"
PATHS = {DEFAULT: "default exchange", EXCHANGE: "through a direct exchange"}


@contextlib.contextmanager
def chroot_of_its_own() -> Iterator[str]:
    """The gateway's metadata in a ZooKeeper chroot of its own: gateways of other runs on the
    shared ZooKeeper load every vhost there and stand for leader of each (the leader feeds the
    streams: one of theirs, busy or dying, would be measured instead of this one)."""
    path = f"/bench-streams-{uuid.uuid4().hex[:12]}"
    with kazoo_client(ZOOKEEPER) as client:
        client.ensure_path(path)
        try:
            yield ZOOKEEPER + path
        finally:
            client.delete(path, recursive=True)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def latency(port: int, messages: int) -> dict[str, list[float]]:
    """Publish-to-delivery times (ms) of both paths, measured in turns (one message to the
    default exchange, then one through the direct exchange, ...) so that both see the same
    conditions: on a shared machine a load that comes and goes would otherwise land on one."""
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    arrived: dict[bytes, float] = {}

    def on_message(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
        arrived[body] = time.monotonic()
        ch.basic_ack(method.delivery_tag)

    consumer.basic_qos(prefetch_count=100)
    consumer.exchange_declare("bench-x", "direct")
    routes: dict[str, tuple[str, str]] = {}
    for path in PATHS:
        stream = f"lat-{path}-{time.monotonic_ns()}"
        consumer.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
        routes[path] = ("", stream)
        if path == EXCHANGE:
            consumer.queue_bind(stream, "bench-x", stream)
            routes[path] = ("bench-x", stream)
        consumer.basic_consume(stream, on_message, arguments={"x-stream-offset": "next"})
    consumer.connection.process_data_events(time_limit=0.2)
    samples: dict[str, list[float]] = {path: [] for path in PATHS}
    for n in range(messages + 10):  # 10 of each unmeasured first
        for path in PATHS:
            body = f"{path}{n}".encode()
            exchange, key = routes[path]
            sent = time.monotonic()
            publisher.basic_publish(exchange, key, body)
            deadline = sent + 30
            while body not in arrived:
                consumer.connection.process_data_events(time_limit=0.0005)
                if time.monotonic() > deadline:
                    raise SystemExit(f"message {body!r} did not arrive")
            if n >= 10:
                samples[path].append((arrived[body] - sent) * 1000)
    consumer.connection.close()
    publisher.connection.close()
    return samples


def first_after_bind(port: int, rounds: int) -> list[float]:
    """Bind-Ok to delivery (ms) of the first message through a new binding: each round binds
    the stream to a fresh routing key, publishes one message with it and waits for it (the
    key's topic and the stream's subscription on it are new: the leader's feed must start
    reading that topic)."""
    channel = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    stream = f"bind-{time.monotonic_ns()}"
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    channel.exchange_declare("bench-bind", "direct")
    arrived: dict[bytes, float] = {}

    def on_message(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
        arrived[body] = time.monotonic()
        ch.basic_ack(method.delivery_tag)

    channel.basic_qos(prefetch_count=100)
    channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "next"})
    samples: list[float] = []
    for n in range(rounds + 3):  # 3 unmeasured first
        key = f"k{n}"
        channel.queue_bind(stream, "bench-bind", key)
        bound = time.monotonic()
        body = key.encode()
        channel.basic_publish("bench-bind", key, body)
        while body not in arrived:
            channel.connection.process_data_events(time_limit=0.0005)
            if time.monotonic() > bound + 30:
                raise SystemExit(f"message {body!r} did not arrive")
        if n >= 3:
            samples.append((arrived[body] - bound) * 1000)
    channel.connection.close()
    return samples


class Tally:
    """Counts deliveries, acknowledging them with ``multiple`` every 100."""

    def __init__(self) -> None:
        self.got = 0

    def on_message(self, ch: Any, method: Any, _properties: Any, _body: bytes) -> None:
        self.got += 1
        if self.got % 100 == 0:
            ch.basic_ack(method.delivery_tag, multiple=True)


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
    tally = Tally()

    channel.basic_qos(prefetch_count=500)
    started = time.monotonic()
    channel.basic_consume(stream, tally.on_message, arguments={"x-stream-offset": "first"})
    while tally.got < backlog:
        channel.connection.process_data_events(time_limit=0.05)
        if time.monotonic() - started > 300:
            raise SystemExit(f"read {tally.got} of {backlog}")
    rate = backlog / (time.monotonic() - started)
    channel.connection.close()
    return published, rate


def feed_rate(port: int, count: int) -> tuple[float, float]:
    """``count`` messages of 100 bytes published through a direct exchange without confirms,
    as fast as one pika channel goes, to a stream read from ``next``: the publish rate, and
    the rate at which they reach the stream's consumer (the leader's feed appends each)."""
    consumer = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    publisher = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port)).channel()
    stream = f"feed-{time.monotonic_ns()}"
    consumer.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    consumer.exchange_declare("bench-feed", "direct")
    consumer.queue_bind(stream, "bench-feed", stream)
    tally = Tally()

    consumer.basic_qos(prefetch_count=500)
    consumer.basic_consume(stream, tally.on_message, arguments={"x-stream-offset": "next"})
    publisher.basic_publish("bench-feed", stream, b"first")  # the key's topic, subscribed
    deadline = time.monotonic() + 30
    while tally.got < 1:
        consumer.connection.process_data_events(time_limit=0.05)
        if time.monotonic() > deadline:
            raise SystemExit("the first message through the exchange did not arrive")
    body = b"x" * 100
    started = time.monotonic()
    for _ in range(count):
        publisher.basic_publish("bench-feed", stream, body)
    published = count / (time.monotonic() - started)
    while tally.got < count + 1:
        consumer.connection.process_data_events(time_limit=0.05)
        if time.monotonic() - started > 300:
            raise SystemExit(f"fed {tally.got - 1} of {count}")
    fed = count / (time.monotonic() - started)
    consumer.connection.close()
    publisher.connection.close()
    return published, fed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--bind-rounds", type=int, default=50)
    parser.add_argument("--fed", type=int, default=20_000)
    args = parser.parse_args()
    with (
        httpx.Client(base_url=WEB, timeout=30) as admin,
        namespace_of_its_own(admin, ZOOKEEPER, "public") as namespace,
        chroot_of_its_own() as zookeeper,
        tempfile.TemporaryDirectory() as directory,
    ):
        port = free_port()
        config = write_config(
            Path(directory),
            port=port,
            namespace=namespace,
            zookeeper=zookeeper,
            web_url=WEB,
            broker_url=BROKER,
        )
        gateway = GatewayProcess("bench", config, port).start().wait_ready()
        try:
            for path, samples in latency(port, args.messages).items():
                print(
                    f"latency publish->deliver, {PATHS[path]}: {len(samples)} messages, "
                    f"p50 {statistics.median(samples):.1f} ms, "
                    f"p99 {percentile(samples, 0.99):.1f} ms, max {max(samples):.1f} ms"
                )
            samples = first_after_bind(port, args.bind_rounds)
            print(
                f"first message through a new binding, Bind-Ok->deliver: {len(samples)} rounds, "
                f"p50 {statistics.median(samples):.1f} ms, "
                f"p99 {percentile(samples, 0.99):.1f} ms, max {max(samples):.1f} ms"
            )
            published, fed = feed_rate(port, args.fed)
            print(
                f"through a direct exchange, {args.fed} x 100 B without confirms: published "
                f"{published:,.0f} msg/s, delivered from the stream at {fed:,.0f} msg/s"
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
