"""A consumer that closes holding the rest of a batch part of which it delivered, on a broker
that acknowledges whole entries (the shared stack, Pulsar's default): the rest is moved to the
queue's own topic and acknowledged, so the batch is not dispatched again
(gateway/backend/pulsar/split_batches.py). Against the real broker, through both listeners."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from gateway.backend.interface import Message
from gateway.backend.pulsar.delivery import Copy, PulsarQueueSubscription
from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.model.dead_letter import Reason
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient
from gateway.pulsar.consumer import ConsumerOptions, TrioConsumer
from gateway.pulsar.producer import ProducerOptions
from tests.integration.pulsar.conftest import Topic, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("both_paths")]

COUNT = 5


async def write_batch(client: PulsarClient, name: str) -> None:
    """m0..m4 in one entry, as a batching producer writes them."""
    producer = await client.create_producer(
        name,
        ProducerOptions(batching_max_messages=COUNT, batching_max_publish_delay_ms=10_000),
    )
    handles = [await producer.submit(b"m%d" % i) for i in range(COUNT)]
    for handle in handles:
        await handle.wait()
    await producer.aclose()


async def read_ahead(consumer: TrioConsumer, count: int) -> None:
    async def arrived() -> bool:
        return consumer.buffered >= count

    await wait_for(arrived)


async def test_take_unreceived_gives_back_what_was_read_ahead_with_its_place_in_the_batch(
    client: PulsarClient, topic: Topic
) -> None:
    name = topic("take")
    consumer = await client.subscribe(name, "q", ConsumerOptions(receiver_queue_size=10))
    await write_batch(client, name)
    with trio.fail_after(10):
        taken = [await consumer.receive() for _ in range(2)]
    await read_ahead(consumer, COUNT - 2)
    # Basic.Cancel keeps a batch's messages (a negative acknowledgement would send the whole
    # entry back): they are still there to take.
    assert consumer.stop_receiving() == COUNT - 2
    left = consumer.take_unreceived()
    assert [message.payload for message in left] == [b"m2", b"m3", b"m4"]
    entry = taken[0].batch_position.entry
    assert [message.batch_position for message in [*taken, *left]] == [
        (entry, index, COUNT) for index in range(COUNT)
    ]
    assert consumer.buffered == 0 and consumer.take_unreceived() == []
    await consumer.aclose()


class Copies:
    """The subscription's copy writer: what it was asked to write."""

    def __init__(self) -> None:
        self.written: list[tuple[bytes, bool]] = []

    async def __call__(self, queue: str, copies: Sequence[Copy]) -> None:
        assert queue == "q"
        for copy in copies:
            assert copy.enqueued > 0
            self.written.append((copy.message.body, copy.requeued))


async def refuse_dead_letters(queue: str, message: Message, reason: Reason) -> None:
    raise AssertionError(f"nothing is dead-lettered here ({reason})")


async def never_again(client: PulsarClient, admin: PulsarAdmin, name: str) -> None:
    """Every message of the entry is acknowledged: the broker does not send it again."""

    async def settled() -> bool:
        return await admin.subscription_backlog(name, "q") == 0

    await wait_for(settled)
    again = await client.subscribe(name, "q")
    with trio.move_on_after(0.5):
        message = await again.receive()
        pytest.fail(f"the batch came back: {message.payload!r}")
    await again.aclose()


async def subscribed_batch(
    client: PulsarClient, name: str, options: ConsumerOptions | None = None
) -> tuple[TrioConsumer, PulsarQueueSubscription, Copies]:
    """A queue subscription of topic ``name`` (its copies recorded), then a batch written."""
    copies = Copies()
    consumer = await client.subscribe(name, "q", options or ConsumerOptions(receiver_queue_size=10))
    subscription = PulsarQueueSubscription(
        "q",
        consumer,
        lambda _message, _received: True,
        lambda _subscription: None,
        Redeliveries(),
        copies,
        refuse_dead_letters,
    )
    await write_batch(client, name)
    return consumer, subscription, copies


async def test_a_closing_consumer_moves_the_rest_of_a_batch_it_delivered_part_of(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    name = topic("split")
    consumer, subscription, copies = await subscribed_batch(client, name)
    with trio.fail_after(10):
        acknowledged = await subscription.receive()
        requeued = await subscription.receive()
    acknowledged.ack_now()
    await requeued.reject(True)  # a copy, then the original acknowledged
    await read_ahead(consumer, COUNT - 2)
    await subscription.close()
    assert copies.written[0] == (b"m1", True)
    assert sorted(copies.written[1:]) == [(b"m2", False), (b"m3", False), (b"m4", False)]

    await never_again(client, admin, name)


async def test_a_batch_nothing_of_which_was_delivered_comes_back_whole_in_its_place(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    name = topic("whole")
    consumer, subscription, copies = await subscribed_batch(client, name)
    await read_ahead(consumer, COUNT)
    await subscription.close()
    assert copies.written == []
    again = await client.subscribe(name, "q")
    with trio.fail_after(10):
        back = [await again.receive() for _ in range(COUNT)]
    assert [message.payload for message in back] == [b"m%d" % i for i in range(COUNT)]
    await again.aclose()


async def test_the_rest_of_a_batch_still_in_the_receiver_queue_is_moved_too(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    """A buffer of one: the listener pauses after each message, so most of the batch is still
    in pulsar-client's receiver queue when the consumer closes. It is brought out and moved
    (``TrioConsumer.collect_entry_tails``); before, the whole entry came back, the
    acknowledged message with it."""
    name = topic("tail")
    options = ConsumerOptions(receiver_queue_size=10, buffer_size=1)
    consumer, subscription, copies = await subscribed_batch(client, name, options)
    with trio.fail_after(10):
        acknowledged = await subscription.receive()
    acknowledged.ack_now()
    assert consumer.buffered <= 1  # the rest waits in the receiver queue
    await subscription.close()
    assert sorted(copies.written) == [(b"m%d" % i, False) for i in range(1, COUNT)]

    await never_again(client, admin, name)


async def test_a_stopped_consumer_with_a_queue_of_one_gives_up_the_rest_of_a_batch(
    client: PulsarClient, topic: Topic
) -> None:
    """A consumer reading ahead one message (prefetch 1) was sent a batch of five: after it
    returned one and stopped (Basic.Cancel with that delivery unacknowledged), the rest is
    taken out, from its buffer and from pulsar-client's receiver queue
    (``take_batched_read_ahead``, for held_back.py)."""
    name = topic("stopped")
    consumer = await client.subscribe(
        name, "q", ConsumerOptions(receiver_queue_size=1, buffer_size=1)
    )
    await write_batch(client, name)
    with trio.fail_after(10):
        taken = await consumer.receive()
    consumer.stop_receiving(hand_back=False)
    with trio.fail_after(10):
        rest = await consumer.take_batched_read_ahead(5.0)
    assert taken.payload == b"m0"
    assert [message.payload for message in rest] == [b"m%d" % i for i in range(1, COUNT)]
    await consumer.aclose()
