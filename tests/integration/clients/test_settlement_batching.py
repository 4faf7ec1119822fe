"""Per-message settlement when Pulsar stores several messages in one entry (a batch).

Pulsar acknowledges and redelivers whole entries unless the broker tracks acknowledgements by
batch index (``acknowledgmentAtBatchIndexLevelEnabled``, PIP-54). AMQP settles one message at
a time: an acknowledged message is never delivered again, a requeued one is, with
``redelivered=true``, and the others of its entry are not disturbed.

Every test runs on both kinds of broker: the shared stack (Pulsar's default, entry-level
acknowledgements: pulsar-client acknowledges an entry once all of it is, and the gateway moves
what it requeues by copy) and a standalone of the session's own with the setting on
(``batch_index_stack``: its consumers send per-index acknowledgements). The gateway's
producers batch on both, which is checked. Both kinds of batch are settled: the gateway's own
and a native Pulsar producer's.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pika
import pulsar
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.model.naming import subscription_for, topic_for
from gateway.model.vhost import Namespace
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_entries import Entry, entries_of, entry_holding
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config

pytestmark = pytest.mark.integration

COUNT = 10


@dataclass
class Setup:
    gateway: GatewayInThread
    namespace: Namespace
    stack: Any
    # The broker keeps acknowledgements per batch index (batch_index_stack).
    tracks_indexes: bool

    def connect(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(
            pika.ConnectionParameters(host="127.0.0.1", port=self.gateway.port)
        )

    def stats(self, queue: str) -> dict[str, Any]:
        topic = topic_for(self.namespace, "", queue)
        path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
        response = httpx.get(self.stack.web_url + path, timeout=10)
        response.raise_for_status()
        return dict(response.json()["subscriptions"][subscription_for(queue)])

    def entries(self, queue: str, count: int) -> list[Entry]:
        """How the first ``count`` messages of ``queue``'s own topic lie in its entries."""
        return entries_of(self.stack.broker_url, topic_for(self.namespace, "", queue), count)


@pytest.fixture(params=["entry-acks", "batch-index-acks"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    tracks_indexes = request.param == "batch-index-acks"
    stack = request.getfixturevalue("batch_index_stack" if tracks_indexes else "pulsar_stack")
    with fresh_namespace(stack) as namespace:
        config = dataclasses.replace(
            stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace),
            # A native producer writes to a queue's topic here: its subscription must exist
            # from the declare on, not from the first publish through the gateway.
            amqpLazySubscriptions=False,
        )
        assert config.amqpBatchingEnabled  # the default: what users run
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            yield Setup(gateway, Namespace("public", namespace), stack, tracks_indexes)


@dataclass
class Got:
    tag: int
    body: bytes
    redelivered: bool


class Collector:
    """Deliveries of one pika consumer, waited for with a deadline."""

    def __init__(self, connection: pika.BlockingConnection, channel: BlockingChannel) -> None:
        self.connection = connection
        self.channel = channel
        self.got: list[Got] = []

    def on_message(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.got.append(Got(method.delivery_tag, body, method.redelivered))

    def wait_for(self, done: Callable[[], bool], timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"timed out; got {self.got}"
            self.connection.process_data_events(time_limit=0.05)


def consume(setup: Setup, queue: str, prefetch: int) -> Collector:
    connection = setup.connect()
    channel = connection.channel()
    channel.basic_qos(prefetch_count=prefetch)
    collector = Collector(connection, channel)
    channel.basic_consume(queue, collector.on_message)
    return collector


def publish_through_gateway(setup: Setup, queue: str) -> None:
    """m0..m9 and "last" in one transaction: the commit hands them to the queue's producer in
    one pass, so that m1..last share an entry (m0, sent while nothing was in flight, goes
    alone: producer.py)."""
    connection = setup.connect()
    channel = connection.channel()
    channel.queue_declare(queue)
    channel.tx_select()
    for i in range(COUNT):
        channel.basic_publish("", queue, b"m%d" % i)
    channel.basic_publish("", queue, b"last")
    channel.tx_commit()  # Commit-Ok once every message is stored
    connection.close()


def check_gateway_batching(setup: Setup, queue: str, together: set[bytes]) -> None:
    """The gateway's producers batched: ``together`` share an entry (else a test would settle
    nothing inside a batch), whatever the broker acknowledges."""
    entries = setup.entries(queue, COUNT + 1)
    entry = entry_holding(entries, next(iter(together)))
    assert entry.batch and together <= set(entry.bodies), entries


def publish_native_batch(setup: Setup, queue: str, count: int = COUNT) -> None:
    """``count`` messages in one Pulsar entry, as a batching native producer writes them."""
    connection = setup.connect()
    connection.channel().queue_declare(queue)
    connection.close()
    client = pulsar.Client(setup.stack.broker_url)
    try:
        producer = client.create_producer(
            topic_for(setup.namespace, "", queue),
            batching_enabled=True,
            batching_max_messages=count,
            batching_max_publish_delay_ms=10_000,
        )
        for i in range(count):
            producer.send_async(b"m%d" % i, None)
        producer.flush()
        producer.close()
    finally:
        client.close()


def bodies(got: list[Got]) -> list[bytes]:
    return [g.body for g in got]


def settle_and_check(setup: Setup, queue: str, total: int) -> None:
    """Ack even-numbered messages, requeue m3, keep the rest unacked: only m3 comes back, and
    it is marked redelivered. Then close the channel: exactly the unacked ones come back,
    marked redelivered, and once they are acknowledged nothing is left in Pulsar."""
    first = consume(setup, queue, prefetch=total)
    first.wait_for(lambda: len(first.got) == total)
    by_body = {g.body: g for g in first.got}
    assert len(by_body) == total
    assert not any(g.redelivered for g in first.got)
    for i in range(0, COUNT, 2):
        first.channel.basic_ack(by_body[b"m%d" % i].tag)
    first.channel.basic_nack(by_body[b"m3"].tag, requeue=True)
    first.wait_for(lambda: len(first.got) > total)
    back = first.got[total:]
    assert [(g.body, g.redelivered) for g in back] == [(b"m3", True)]
    first.channel.basic_ack(back[0].tag)
    # Anything else of m3's entry coming back would arrive with the same delay as m3 did;
    # with nothing acknowledged or requeued since, none may.
    first.connection.process_data_events(time_limit=0.5)
    assert len(first.got) == total + 1, bodies(first.got[total:])
    first.connection.close()

    held = set(by_body) - {b"m%d" % i for i in range(0, COUNT, 2)} - {b"m3"}
    second = consume(setup, queue, prefetch=total)
    second.wait_for(lambda: len(second.got) >= len(held))
    assert {g.body for g in second.got} == held
    assert all(g.redelivered for g in second.got)
    for g in second.got:
        second.channel.basic_ack(g.tag)
    # Settled in Pulsar: nothing unacknowledged, nothing in the backlog.
    deadline = time.monotonic() + 15
    while True:
        stats = setup.stats(queue)
        if stats["msgBacklog"] == 0:
            break
        assert time.monotonic() < deadline, stats
        second.connection.process_data_events(time_limit=0.1)
    # An acknowledged message never came back.
    assert len(second.got) == len(held), bodies(second.got)
    second.connection.close()


def test_gateway_batches_settle_per_message(setup: Setup) -> None:
    publish_through_gateway(setup, "q")
    # m3 is requeued beside m2 and m4, acknowledged, and m5, held.
    check_gateway_batching(setup, "q", {b"m2", b"m3", b"m4", b"m5"})
    settle_and_check(setup, "q", COUNT + 1)


def test_native_batch_requeue_per_message(setup: Setup) -> None:
    """A batch written by a native producer: the requeue of one message brings back that
    message alone, while the others of its entry are held by the client."""
    publish_native_batch(setup, "native")
    first = consume(setup, "native", prefetch=COUNT)
    first.wait_for(lambda: len(first.got) == COUNT)
    by_body = {g.body: g for g in first.got}
    first.channel.basic_nack(by_body[b"m3"].tag, requeue=True)
    first.wait_for(lambda: len(first.got) > COUNT)
    assert [(g.body, g.redelivered) for g in first.got[COUNT:]] == [(b"m3", True)]
    first.connection.process_data_events(time_limit=0.5)
    assert len(first.got) == COUNT + 1, bodies(first.got[COUNT:])
    for g in first.got:
        if g.body != b"m3" or g.redelivered:
            first.channel.basic_ack(g.tag)
    deadline = time.monotonic() + 15
    while setup.stats("native")["msgBacklog"] != 0:
        assert time.monotonic() < deadline, setup.stats("native")
        first.connection.process_data_events(time_limit=0.1)
    assert len(first.got) == COUNT + 1
    first.connection.close()


def test_native_batch_held_when_the_connection_closes_beside_a_no_ack_consumer(
    setup: Setup,
) -> None:
    """Issue 12 (found by test_settlement_property.py): one channel with an ack-mode consumer
    holding a whole native batch and a no-ack consumer of the same queue; the connection
    closes. Every message of the batch comes back, marked redelivered, once."""
    count = 6
    publish_native_batch(setup, "mixed", count)
    first = consume(setup, "mixed", prefetch=0)
    first.wait_for(lambda: len(first.got) == count)
    assert sorted(bodies(first.got)) == sorted(b"m%d" % i for i in range(count))
    no_ack: list[bytes] = []
    first.channel.basic_consume(
        "mixed", lambda _ch, _m, _p, body: no_ack.append(body), auto_ack=True
    )
    first.connection.process_data_events(time_limit=0)
    first.connection.close()
    assert no_ack == []  # the whole batch is held by the ack-mode consumer

    second = consume(setup, "mixed", prefetch=0)
    second.wait_for(lambda: len(second.got) >= count)
    assert sorted(bodies(second.got)) == sorted(b"m%d" % i for i in range(count))
    assert all(g.redelivered for g in second.got)
    for g in second.got:
        second.channel.basic_ack(g.tag)
    deadline = time.monotonic() + 15
    while setup.stats("mixed")["msgBacklog"] != 0:
        assert time.monotonic() < deadline, setup.stats("mixed")
        second.connection.process_data_events(time_limit=0.1)
    assert len(second.got) == count, bodies(second.got)
    second.connection.close()


def get_one(channel: BlockingChannel, queue: str) -> tuple[int, bytes]:
    """A Basic.Get delivery (retried while the queue still looks empty)."""
    deadline = time.monotonic() + 15
    while True:
        method, _props, body = channel.basic_get(queue)
        if method is not None:
            assert not method.redelivered
            return method.delivery_tag, body
        assert time.monotonic() < deadline, "Basic.Get found nothing"


def test_gateway_batch_get_reject_recover_prefetch(setup: Setup) -> None:
    """Basic.Get, a reject without requeue, a prefetch limit and Basic.Recover, on messages of
    one entry: each settles its own message, and the rest of the entry is delivered meanwhile
    (RabbitMQ delivers a queue's other messages to a consumer while a Basic.Get delivery is
    held unacknowledged)."""
    publish_through_gateway(setup, "g")
    everything = {b"m%d" % i for i in range(COUNT)} | {b"last"}
    check_gateway_batching(setup, "g", {b"m%d" % i for i in range(1, 6)})
    collector = consume_later(setup)
    channel = collector.channel
    acked, rejected, held = (get_one(channel, "g") for _ in range(3))
    channel.basic_ack(acked[0])
    channel.basic_reject(rejected[0], requeue=False)
    channel.basic_qos(prefetch_count=2)
    channel.basic_consume("g", collector.on_message)
    collector.wait_for(lambda: len(collector.got) == 2)
    collector.connection.process_data_events(time_limit=0.5)
    assert len(collector.got) == 2, bodies(collector.got)  # the prefetch limit
    before = {held[1]} | set(bodies(collector.got))
    assert len(before) == 3 and not any(g.redelivered for g in collector.got)

    channel.basic_recover(requeue=True)
    # Every delivery from here on is acknowledged as it arrives (two at a time).
    start = seen = len(collector.got)
    remaining = everything - {acked[1], rejected[1]}

    def settle_new() -> bool:
        nonlocal seen
        for g in collector.got[seen:]:
            channel.basic_ack(g.tag)
        seen = len(collector.got)
        return set(bodies(collector.got[start:])) >= remaining

    collector.wait_for(settle_new)
    deadline = time.monotonic() + 15
    while setup.stats("g")["msgBacklog"] != 0:
        assert time.monotonic() < deadline, setup.stats("g")
        settle_new()
        collector.connection.process_data_events(time_limit=0.1)
    after = collector.got[start:]
    # Each once: the acknowledged and the rejected ones never, the recovered ones redelivered.
    assert sorted(bodies(after)) == sorted(remaining), bodies(after)
    assert {g.body for g in after if g.redelivered} == before, after
    collector.connection.close()


def consume_later(setup: Setup) -> Collector:
    """A connection and channel whose consumer the test starts itself."""
    connection = setup.connect()
    return Collector(connection, connection.channel())


def test_a_held_delivery_of_a_batch_does_not_hold_back_the_rest(setup: Setup) -> None:
    """Two consumers with prefetch 1 (RabbitMQ's work-queue pattern): while the first holds a
    message unacknowledged, the second gets the others, as on RabbitMQ (less the one message
    the first one's Pulsar consumer reads ahead: PulsarResources.receiver_queue_for), also
    when they share a Pulsar entry the first one read: what it read ahead of the batch is
    moved on once its client has been at its limit for a moment
    (gateway/backend/pulsar/held_back.py)."""
    publish_through_gateway(setup, "w")
    everything = {b"m%d" % i for i in range(COUNT)} | {b"last"}
    check_gateway_batching(setup, "w", {b"m1", b"m2", b"m3"})
    slow = consume(setup, "w", prefetch=1)
    slow.wait_for(lambda: len(slow.got) == 1)
    fast = consume(setup, "w", prefetch=1)
    acked = 0

    def settle_new(enough: int) -> bool:
        nonlocal acked
        for g in fast.got[acked:]:
            fast.channel.basic_ack(g.tag)
        acked = len(fast.got)
        slow.connection.process_data_events(time_limit=0)
        return len(fast.got) + len(slow.got) >= enough

    fast.wait_for(lambda: settle_new(len(everything) - 1))  # all but one read ahead
    assert len(slow.got) == 1, bodies(slow.got)  # holding one, it was given no other
    slow.channel.basic_ack(slow.got[0].tag)
    fast.wait_for(lambda: settle_new(len(everything)))
    for g in slow.got[1:]:
        slow.channel.basic_ack(g.tag)
    assert sorted(bodies(fast.got) + bodies(slow.got)) == sorted(everything)
    slow.connection.close()
    fast.connection.close()
