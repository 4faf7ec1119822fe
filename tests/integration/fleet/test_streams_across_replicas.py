"""Stream queues across two replicas: a binding made on one replica is honoured for messages
published through the other (the stream's feeder subscriptions,
backend/pulsar/queue_types/stream/feed.py), and either replica's consumers read the same log
from the same offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on

pytestmark = pytest.mark.integration


DEADLINE = 30.0
STREAM = {"x-queue-type": "stream"}


def read(channel: Any, stream: str, count: int, offset: Any = "first") -> list[tuple[bytes, int]]:
    channel.basic_qos(prefetch_count=20)
    got: list[tuple[bytes, int]] = []

    def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
        got.append((body, properties.headers["x-stream-offset"]))
        ch.basic_ack(method.delivery_tag)

    tag = channel.basic_consume(stream, on_message, arguments={"x-stream-offset": offset})
    deadline = time.monotonic() + DEADLINE
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count}"
        channel.connection.process_data_events(time_limit=0.1)
    channel.basic_cancel(tag)
    return got


def test_bind_on_one_replica_publish_through_the_other_consume_on_either(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (channel_on(gateway) for gateway in replicas)
    a.queue_declare("events", durable=True, arguments=STREAM)
    a.exchange_declare("orders", "topic")
    a.queue_bind("events", "orders", "order.*")  # on replica a
    b.confirm_delivery()
    for n in range(10):  # at once, through replica b
        b.basic_publish("orders", f"order.{n}", f"o{n}".encode())
    b.basic_publish("", "events", b"direct")
    on_a = read(a, "events", 11)
    on_b = read(b, "events", 11)
    assert on_a == on_b  # one log, the same offsets on every replica
    bodies = [body for body, _ in on_a]
    # Each routing key is a topic of its own, and the leader's feed keeps the order within a
    # topic only (docs/compatibility.md, "Stream queues"): across keys, every message, once.
    routed = sorted(body for body in bodies if body != b"direct")
    assert routed == sorted(f"o{n}".encode() for n in range(10))
    # A consumer on the other replica resumes after the offset seen on the first.
    resumed = read(b, "events", 5, on_a[5][1] + 1)
    assert resumed == on_a[6:11]
    # Deleted on one replica: the other's consumer is cancelled.
    cancelled: list[Any] = []
    b.add_on_cancel_callback(cancelled.append)
    b.basic_qos(prefetch_count=5)
    b.basic_consume("events", lambda *args: None, arguments={"x-stream-offset": "next"})
    a.queue_delete("events")
    deadline = time.monotonic() + DEADLINE
    while not cancelled:
        assert time.monotonic() < deadline, "the consumer on the other replica was not cancelled"
        b.connection.process_data_events(time_limit=0.1)
