"""Basic.Get on a queue deleted and declared again under its name, while a client still holds
a message got from the old queue (issue 34).

The gateway's Basic.Get consumer of the old queue, retired while its delivery was held, stayed
attached when the deletion removed the queue's Pulsar subscription: pulsar-client subscribed it
again a moment later (its reconnection), creating the subscription anew, and a queue declared
again under the name shared it, its read-ahead taking the new queue's messages. amqp091-go's
TestRabbitMQQueueNackMultipleRequeue (one exclusive queue declared per connection) then got "2"
before "1". RabbitMQ keeps a channel's publish order, and a deleted queue's consumers are gone.
"""

from __future__ import annotations

import time

import httpx
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.model.naming import subscription_for, topic_for
from tests.integration.clients.conftest import PULSAR_ONLY, Running
from tests.support.clients import unique

# How long the old consumer is given to come back after the deletion (pulsar-client reconnects
# after ~100 ms): the wait ends at once if it does.
RECONNECT_WINDOW = 2.0


def get_one(channel: BlockingChannel, queue: str, timeout: float = 10.0) -> bytes | None:
    """The first message a Get finds within ``timeout`` (the publishes may be on their way)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return bytes(body)
    return None


def consumers_on(running: Running, queue: str) -> int:
    """Consumers attached to the queue's subscription on its own topic (0 without one)."""
    assert running.namespace is not None
    topic = topic_for(running.namespace, "", queue).removeprefix("persistent://")
    stats = httpx.get(f"{running.web_url}/admin/v2/persistent/{topic}/stats", timeout=10)
    if stats.status_code == 404:
        return 0
    stats.raise_for_status()
    subscription = stats.json()["subscriptions"].get(subscription_for(queue))
    return 0 if subscription is None else len(subscription["consumers"])


@pytest.mark.parametrize("running", [PULSAR_ONLY], indirect=True)
def test_a_deleted_queues_get_consumer_does_not_come_back(running: Running) -> None:
    queue = unique("redeclared")
    holder = running.connect()
    old = holder.channel()
    old.queue_declare(queue)
    old.basic_publish("", queue, b"old")
    deadline = time.monotonic() + 10
    method = None
    while method is None and time.monotonic() < deadline:
        method, _, _ = old.basic_get(queue, auto_ack=False)  # held, never settled
    assert method is not None

    other = running.connect()
    channel = other.channel()
    channel.queue_delete(queue)
    deadline = time.monotonic() + RECONNECT_WINDOW
    while time.monotonic() < deadline:
        attached = consumers_on(running, queue)
        assert attached == 0, f"{attached} consumer(s) of the deleted queue '{queue}' attached"
        other.process_data_events(0.05)

    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"1")
    channel.basic_publish("", queue, b"2")
    assert get_one(channel, queue) == b"1"
    assert get_one(channel, queue) == b"2"
    other.close()
    holder.close()
