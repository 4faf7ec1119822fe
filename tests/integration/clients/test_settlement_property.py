"""Settlement as a property: any interleaving of deliveries, gets, acks, nacks, rejects,
recovers, cancels and channel closes keeps RabbitMQ's contract.

- A message is delivered again until it is acknowledged (or dropped: rejected without
  requeue, or delivered to a no-ack consumer), and never after.
- A message is never delivered while a client holds it unacknowledged.
- A message delivered before comes back with ``redelivered=true``.
- A consumer never holds more unacknowledged deliveries than its prefetch.
- When everything is closed (channels, consumers, the whole connection), every unsettled
  message is in the queue, marked redelivered if it had been delivered.

Cancelling a consumer leaves its unacknowledged messages with the channel, as RabbitMQ does:
they are settled by later acks, nacks and rejects, and go back when the channel closes. The
in-memory backend runs many examples (the channel logic); the Pulsar backend runs
a bounded number, with messages published through the gateway (one by one, and as one batch
of the gateway's producer, which each example checks) and with messages written as one batch
by a native producer, on two brokers: the shared stack (entry-level acknowledgements,
Pulsar's default) and ``batch_index_stack`` (``acknowledgmentAtBatchIndexLevelEnabled=true``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pika
import pulsar
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pika.adapters.blocking_connection import BlockingChannel

from gateway.backend.memory import MemoryBackend
from gateway.model.naming import topic_for
from gateway.model.vhost import Namespace
from tests.support.clients import connect, unique
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_entries import entries_of
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config

# ------------------------------------------------------------------------------ operations

Op = tuple[str, int, int, bool, bool]  # name, channel index, item index, flag, flag

OPS = st.tuples(
    st.sampled_from(
        [
            "open",
            "consume",
            "get",
            "pump",
            "pump",
            "ack",
            "ack",
            "nack",
            "reject",
            "recover",
            "cancel",
            "close",
            "reconnect",
        ]
    ),
    st.integers(0, 2),
    st.integers(0, 7),
    st.booleans(),
    st.booleans(),
)


@dataclass(eq=False)
class Consumer:
    tag: str
    prefetch: int
    no_ack: bool
    held: set[int] = field(default_factory=set)  # delivery tags


@dataclass(eq=False)
class Channel:
    pika: BlockingChannel
    consumers: dict[str, Consumer] = field(default_factory=dict)
    # delivery tag -> (body, consumer or None for Basic.Get)
    unacked: dict[int, tuple[bytes, Consumer | None]] = field(default_factory=dict)


class Ledger:
    """What the client knows about each message, and the contract's checks."""

    def __init__(self, bodies: list[bytes]) -> None:
        self.state = dict.fromkeys(bodies, "ready")  # ready | held | done
        self.delivered_before: set[bytes] = set()
        self.deliveries = 0
        # Ready when a no-ack consumer was cancelled: it may have been sent to that consumer
        # (and so settled) while pika, having sent Basic.Cancel, dropped it (RabbitMQ's
        # clients do the same). Such a message may or may not come back.
        self.uncertain: set[bytes] = set()

    def no_ack_consumer_cancelled(self) -> None:
        self.uncertain |= {body for body, state in self.state.items() if state == "ready"}

    def delivered(self, body: bytes, redelivered: bool, *, held: bool) -> None:
        assert body in self.state, body
        assert self.state[body] != "done", f"{body!r} delivered after it was settled"
        self.uncertain.discard(body)
        assert self.state[body] != "held", f"{body!r} delivered while a client holds it"
        if body in self.delivered_before:
            assert redelivered, f"{body!r} delivered again without redelivered=true"
        self.delivered_before.add(body)
        self.state[body] = "held" if held else "done"
        self.deliveries += 1

    def settle(self, body: bytes, *, requeue: bool) -> None:
        if self.state[body] == "held":
            self.state[body] = "ready" if requeue else "done"

    @property
    def unsettled(self) -> set[bytes]:
        return {body for body, state in self.state.items() if state != "done"}

    @property
    def certainly_unsettled(self) -> set[bytes]:
        return self.unsettled - self.uncertain


class Run:
    def __init__(
        self,
        connection: pika.BlockingConnection,
        ledger: Ledger,
        queue: str,
        reconnect: Callable[[], pika.BlockingConnection],
    ) -> None:
        self.connection = connection
        self.reconnect = reconnect
        self.ledger = ledger
        self.queue = queue
        self.channels: list[Channel] = []

    def pick(self, index: int) -> Channel | None:
        return self.channels[index % len(self.channels)] if self.channels else None

    def on_deliver(self, channel: Channel, consumer: Consumer) -> Callable[..., None]:
        def callback(_ch: Any, method: Any, _props: Any, body: bytes) -> None:
            if consumer.prefetch:
                assert len(consumer.held) < consumer.prefetch, "prefetch exceeded"
            self.ledger.delivered(body, method.redelivered, held=not consumer.no_ack)
            if not consumer.no_ack:
                consumer.held.add(method.delivery_tag)
                channel.unacked[method.delivery_tag] = (body, consumer)

        return callback

    def _release(self, channel: Channel, tags: list[int], *, requeue: bool) -> None:
        for tag in tags:
            body, consumer = channel.unacked.pop(tag)
            if consumer is not None:
                consumer.held.discard(tag)
            self.ledger.settle(body, requeue=requeue)

    def apply(self, op: Op) -> None:
        name, ci, item, flag, flag2 = op
        if name == "reconnect":
            # The whole connection closes: every channel's unacknowledged messages go back.
            # What no-ack consumers were sent meanwhile is settled, and pika drops it.
            self.connection.process_data_events(time_limit=0)
            if any(c.no_ack for channel in self.channels for c in channel.consumers.values()):
                self.ledger.no_ack_consumer_cancelled()
            # pika closes the channels in the order they were opened, each by cancelling its
            # consumers, then Channel.Close: what one channel gives back may reach a no-ack
            # consumer of a channel closed after it, and pika drops that with its channel (on
            # RabbitMQ too). What a channel's own consumers held stays with it until its
            # Channel.Close (Basic.Cancel leaves it there), when none of them consumes.
            for index, channel in enumerate(self.channels):
                later = self.channels[index + 1 :]
                if any(c.no_ack for other in later for c in other.consumers.values()):
                    self.ledger.uncertain |= {body for body, _ in channel.unacked.values()}
            self.connection.close()
            for channel in self.channels:
                self._release(channel, sorted(channel.unacked), requeue=True)
            self.channels.clear()
            self.connection = self.reconnect()
            return
        if name == "open":
            if len(self.channels) < 3:
                self.channels.append(Channel(self.connection.channel()))
            return
        channel = self.pick(ci)
        if channel is None:
            return
        ch = channel.pika
        if name in ("ack", "nack") and flag:
            # `multiple` settles every tag up to the chosen one, including deliveries the
            # server sent before it that pika has read but not dispatched yet (a consumer's
            # delivery that arrived before a Basic.Get-Ok): the ledger must know them first.
            self.connection.process_data_events(time_limit=0)
        tags = sorted(channel.unacked)
        tag = tags[item % len(tags)] if tags else None
        if name == "consume":
            prefetch = item % 4
            ch.basic_qos(prefetch_count=prefetch)
            consumer = Consumer("", prefetch, no_ack=flag)
            consumer.tag = ch.basic_consume(
                self.queue, self.on_deliver(channel, consumer), auto_ack=flag
            )
            channel.consumers[consumer.tag] = consumer
        elif name == "get":
            method, _props, body = ch.basic_get(self.queue, auto_ack=flag)
            if method is not None:
                self.ledger.delivered(body, method.redelivered, held=not flag)
                if not flag:
                    channel.unacked[method.delivery_tag] = (body, None)
        elif name == "pump":
            self.connection.process_data_events(time_limit=0.02 if flag else 0)
        elif name == "ack" and tag is not None:
            ch.basic_ack(tag, multiple=flag)
            self._release(channel, [t for t in tags if t <= tag] if flag else [tag], requeue=False)
        elif name == "nack" and tag is not None:
            ch.basic_nack(tag, multiple=flag, requeue=flag2)
            chosen = [t for t in tags if t <= tag] if flag else [tag]
            self._release(channel, chosen, requeue=flag2)
        elif name == "reject" and tag is not None:
            ch.basic_reject(tag, requeue=flag)
            self._release(channel, [tag], requeue=flag)
        elif name == "recover" and not channel.consumers:
            # Only where nothing can be on its way: Basic.Recover also requeues deliveries
            # sent before it that pika dispatches afterwards, which this ledger would take
            # for new ones. (A channel with consumers recovers by closing, below.)
            ch.basic_recover(requeue=True)
            self._release(channel, tags, requeue=True)
        elif name == "cancel" and channel.consumers:
            self.connection.process_data_events(time_limit=0)  # dispatch what arrived
            consumer = list(channel.consumers.values())[item % len(channel.consumers)]
            self._cancel(channel, consumer)
        elif name == "close":
            self._close(channel)

    def _cancel(self, channel: Channel, consumer: Consumer) -> None:
        del channel.consumers[consumer.tag]
        # pika hands back what a no-ack consumer received before Cancel-Ok (settled by its
        # delivery), and rejects with requeue what an ack-mode one had not dispatched yet.
        for method, _props, body in channel.pika.basic_cancel(consumer.tag):
            self.ledger.delivered(body, method.redelivered, held=False)
        if consumer.no_ack:
            self.ledger.no_ack_consumer_cancelled()
        # Its unacknowledged messages stay with the channel (still held, settled later).

    def _close(self, channel: Channel) -> None:
        """Close a channel; no-ack consumers are cancelled first, so that what they were sent
        (settled on sending) is seen rather than dropped by pika with the channel."""
        self.connection.process_data_events(time_limit=0)
        for consumer in [c for c in channel.consumers.values() if c.no_ack]:
            self._cancel(channel, consumer)
        self.channels.remove(channel)
        channel.pika.close()
        self._release(channel, sorted(channel.unacked), requeue=True)

    def finish(self, timeout: float) -> None:
        """Close everything; then every unsettled message must come back, once."""
        for channel in list(self.channels):
            self._close(channel)
        final = Channel(self.connection.channel())
        consumer = Consumer("", 0, no_ack=False)
        consumer.tag = final.pika.basic_consume(self.queue, self.on_deliver(final, consumer))
        deadline = time.monotonic() + timeout

        def received() -> set[bytes]:
            return {body for body, _ in final.unacked.values()}

        while not self.ledger.certainly_unsettled <= received():
            assert time.monotonic() < deadline, (
                sorted(self.ledger.certainly_unsettled),
                sorted(received()),
            )
            self.connection.process_data_events(time_limit=0.05)
        # Then the queue empties: whatever else comes was uncertain, and comes once.
        while True:
            if final.unacked:
                final.pika.basic_ack(max(final.unacked), multiple=True)
                self._release(final, sorted(final.unacked), requeue=False)
            left = final.pika.queue_declare(self.queue, passive=True).method.message_count
            if left == 0 and not self.ledger.unsettled - self.ledger.uncertain:
                break
            assert time.monotonic() < deadline, (left, sorted(self.ledger.unsettled))
            self.connection.process_data_events(time_limit=0.05)
        assert self.ledger.unsettled <= self.ledger.uncertain
        final.pika.close()


def run_example(
    port: int,
    ops: list[Op],
    count: int,
    *,
    publish: Callable[[pika.BlockingConnection, str, list[bytes]], None],
    timeout: float = 15.0,
) -> None:
    connection = connect(port)
    try:
        queue = unique("settle")
        bodies = [b"m%d" % i for i in range(count)]
        setup = connection.channel()
        setup.queue_declare(queue)
        publish(connection, queue, bodies)
        setup.close()
        run = Run(connection, Ledger(bodies), queue, lambda: connect(port))
        try:
            for op in ops:
                run.apply(op)
            run.finish(timeout)
        finally:
            connection = run.connection
    finally:
        if connection.is_open:
            connection.close()


def publish_confirmed(connection: pika.BlockingConnection, queue: str, bodies: list[bytes]) -> None:
    channel = connection.channel()
    channel.confirm_delivery()
    for body in bodies:
        channel.basic_publish("", queue, body)
    channel.close()


# ------------------------------------------------------------------------------ memory


@pytest.fixture(scope="module")
def memory_gateway() -> Iterator[GatewayInThread]:
    with GatewayInThread(backend=MemoryBackend()) as gateway:
        yield gateway


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(OPS, max_size=40), count=st.integers(1, 6))
# A multiple ack of a Basic.Get's tag also acks the consumer's earlier delivery that pika has
# not dispatched yet; that frees the prefetch slot (found by Hypothesis in a clean clone).
@example(
    ops=[
        ("open", 2, 2, False, True),
        ("consume", 0, 1, False, False),
        ("get", 0, 7, False, False),
        ("ack", 2, 5, True, False),
        ("nack", 0, 7, False, True),
        ("consume", 2, 4, False, False),
        ("close", 0, 4, True, False),
        ("cancel", 1, 7, False, False),
    ],
    count=4,
)
def test_settlement_on_the_memory_backend(
    memory_gateway: GatewayInThread, ops: list[Op], count: int
) -> None:
    run_example(memory_gateway.port, ops, count, publish=publish_confirmed)


# ------------------------------------------------------------------------------ pulsar


@dataclass
class PulsarGateway:
    gateway: GatewayInThread
    namespace: Namespace
    broker_url: str
    # The broker keeps acknowledgements per batch index (batch_index_stack).
    tracks_indexes: bool


@pytest.fixture(scope="module", params=["entry-acks", "batch-index-acks"])
def pulsar_gateway(request: pytest.FixtureRequest) -> Iterator[PulsarGateway]:
    tracks_indexes = request.param == "batch-index-acks"
    stack = request.getfixturevalue("batch_index_stack" if tracks_indexes else "pulsar_stack")
    with fresh_namespace(stack) as namespace:
        config = dataclasses.replace(
            stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace),
            # Native batches are written to queues' topics: subscribed from the declare on.
            amqpLazySubscriptions=False,
        )
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            yield PulsarGateway(
                gateway, Namespace("public", namespace), stack.broker_url, tracks_indexes
            )


PULSAR_SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.mark.integration
@PULSAR_SETTINGS
@given(ops=st.lists(OPS, max_size=30), count=st.integers(1, 5))
def test_settlement_on_pulsar(pulsar_gateway: PulsarGateway, ops: list[Op], count: int) -> None:
    run_example(pulsar_gateway.gateway.port, ops, count, publish=publish_confirmed)


@pytest.mark.integration
@PULSAR_SETTINGS
# Three at least: the first message goes alone (nothing in flight: producer.py sends it at once),
# the others of the commit follow as one group, one entry.
@given(ops=st.lists(OPS, max_size=30), count=st.integers(3, 6))
def test_settlement_on_pulsar_with_gateway_batches(
    pulsar_gateway: PulsarGateway, ops: list[Op], count: int
) -> None:
    """Published in one transaction: the gateway's producer writes them as one batch
    (checked), and every operation applies."""

    def publish_in_one_commit(
        connection: pika.BlockingConnection, queue: str, bodies: list[bytes]
    ) -> None:
        channel = connection.channel()
        channel.tx_select()
        for body in bodies:
            channel.basic_publish("", queue, body)
        channel.tx_commit()
        channel.close()
        topic = topic_for(pulsar_gateway.namespace, "", queue)
        entries = entries_of(pulsar_gateway.broker_url, topic, len(bodies))
        assert any(entry.batch and len(entry.bodies) > 1 for entry in entries), entries

    run_example(pulsar_gateway.gateway.port, ops, count, publish=publish_in_one_commit)


@pytest.mark.integration
@PULSAR_SETTINGS
@given(ops=st.lists(OPS, max_size=30), count=st.integers(2, 6))
def test_settlement_on_pulsar_with_a_batch(
    pulsar_gateway: PulsarGateway, ops: list[Op], count: int
) -> None:
    def publish_batch(
        _connection: pika.BlockingConnection, queue: str, bodies: list[bytes]
    ) -> None:
        client = pulsar.Client(pulsar_gateway.broker_url)
        try:
            producer = client.create_producer(
                topic_for(pulsar_gateway.namespace, "", queue),
                batching_enabled=True,
                batching_max_messages=len(bodies),
                batching_max_publish_delay_ms=10_000,
            )
            for body in bodies:
                producer.send_async(body, None)
            producer.flush()
            producer.close()
        finally:
            client.close()

    run_example(pulsar_gateway.gateway.port, ops, count, publish=publish_batch)
