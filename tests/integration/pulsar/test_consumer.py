"""TrioConsumer against the real broker: ack/nack, sharing, redelivery, flow control."""

from __future__ import annotations

import gc
import weakref

import pulsar
import pytest
import trio

from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient
from gateway.pulsar.consumer import ConsumerOptions, TrioConsumer
from gateway.pulsar.errors import ClosedError, PulsarClientError
from gateway.pulsar.producer import ProducerOptions, TrioProducer
from gateway.pulsar.received import ReceivedMessage
from tests.conftest import StackEndpoints
from tests.integration.pulsar.conftest import Topic, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("both_paths")]


async def publish(producer: TrioProducer, count: int, prefix: str = "m") -> list[bytes]:
    bodies = [f"{prefix}{i}".encode() for i in range(count)]
    handles = [await producer.submit(body) for body in bodies]
    for handle in handles:
        await handle.wait()
    return bodies


async def receive_n(
    consumer: TrioConsumer, count: int, *, ack: bool = True
) -> list[ReceivedMessage]:
    got = []
    with trio.fail_after(20):
        for _ in range(count):
            message = await consumer.receive()
            if ack:
                consumer.acknowledge(message)
            got.append(message)
    return got


async def test_receive_ack_empties_the_backlog(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    name = topic("ack")
    consumer = await client.subscribe(name, "q")
    producer = await client.create_producer(name)
    sent = await publish(producer, 10)
    got = await receive_n(consumer, 10)
    assert [m.payload for m in got] == sent
    assert all(m.redelivery_count == 0 and m.topic == name for m in got)

    async def backlog_empty() -> bool:
        return await admin.subscription_backlog(name, "q") == 0

    await wait_for(backlog_empty)  # acks are grouped for ~100 ms by pulsar-client


async def test_nack_redelivers_quickly_with_redelivery_count_1(
    client: PulsarClient, topic: Topic
) -> None:
    name = topic("nack")
    consumer = await client.subscribe(
        name, "q", ConsumerOptions(negative_ack_redelivery_delay_ms=100)
    )
    producer = await client.create_producer(name)
    await producer.send(b"again", {"k": "v"})
    first = (await receive_n(consumer, 1, ack=False))[0]
    start = trio.current_time()
    consumer.negative_acknowledge(first)
    again = (await receive_n(consumer, 1))[0]
    assert trio.current_time() - start < 5  # pulsar-client's default would be 60 s
    assert (again.payload, again.properties) == (b"again", {"k": "v"})
    assert again.message_id == first.message_id
    assert again.redelivery_count == 1


async def test_two_consumers_share_work_without_loss_or_duplicates(
    client: PulsarClient, topic: Topic
) -> None:
    name = topic("shared")
    options = ConsumerOptions(receiver_queue_size=5)
    consumers = [await client.subscribe(name, "q", options) for _ in range(2)]
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    sent = await publish(producer, 300)
    received: list[list[bytes]] = [[], []]

    async def worker(index: int) -> None:
        consumer = consumers[index]
        async for message in consumer:
            received[index].append(message.payload)
            consumer.acknowledge(message)
            await trio.sleep(0.001)  # a little work, so both get a share

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for index in range(2):
                nursery.start_soon(worker, index)
            while sum(map(len, received)) < len(sent):
                await trio.sleep(0.02)
            nursery.cancel_scope.cancel()
    everything = received[0] + received[1]
    assert sorted(everything) == sorted(sent)  # nothing lost, nothing twice
    assert all(len(r) > 30 for r in received)  # both did real work


async def test_closing_a_consumer_redelivers_its_unacked_messages_to_the_other(
    client: PulsarClient, topic: Topic
) -> None:
    name = topic("handover")
    first = await client.subscribe(name, "q", ConsumerOptions(receiver_queue_size=50))
    producer = await client.create_producer(name)
    sent = await publish(producer, 20)
    held = await receive_n(first, 20, ack=False)  # delivered, never acknowledged
    assert [m.payload for m in held] == sent
    second = await client.subscribe(name, "q")
    await first.aclose()
    with pytest.raises(ClosedError):
        first.acknowledge(held[0])
    got = await receive_n(second, 20)
    assert sorted(m.payload for m in got) == sorted(sent)
    # Pulsar does not count a redelivery caused by a consumer going away (only nacks and
    # explicit redelivery requests count): AMQP's "redelivered" cannot be derived from this.
    assert all(m.redelivery_count == 0 for m in got)


async def test_cancelled_receives_never_lose_messages(client: PulsarClient, topic: Topic) -> None:
    name = topic("cancel")
    consumer = await client.subscribe(name, "q", ConsumerOptions(receiver_queue_size=10))
    # Cancelled while nothing is there: takes nothing.
    with trio.move_on_after(0.05) as scope:
        await consumer.receive()
    assert scope.cancelled_caught
    producer = await client.create_producer(name)
    got: list[bytes] = []
    cancelled = 0

    async def produce() -> None:
        await publish(producer, 300)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            while len(got) < 300:
                # Receives with tiny deadlines: many are cancelled while parked or mid-wake.
                with trio.move_on_after(0.0005) as scope:
                    message = await consumer.receive()
                    got.append(message.payload)
                    consumer.acknowledge(message)
                cancelled += scope.cancelled_caught
    assert sorted(got) == sorted(f"m{i}".encode() for i in range(300))
    assert cancelled > 0


async def test_buffering_is_bounded_by_buffer_and_receiver_queue(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    name = topic("bounded")
    options = ConsumerOptions(receiver_queue_size=5, buffer_size=8)
    consumer = await client.subscribe(name, "q", options)
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    await publish(producer, 100)

    dispatched: list[int] = []

    async def settled() -> bool:
        # The broker's count of messages dispatched to us and not acknowledged, stable twice.
        dispatched.append((await admin.topic_stats(name)).subscriptions["q"].unacked_messages)
        return consumer.paused and len(dispatched) > 2 and dispatched[-1] == dispatched[-3]

    await wait_for(settled)
    assert consumer.buffered == 8  # exactly the trio-side bound
    # Plus what sits in the C++ receiver queue (permits go back in halves): never more than 5.
    assert 8 < dispatched[-1] <= 8 + 5
    got = await receive_n(consumer, 100)  # resuming works all the way through
    assert len({m.message_id for m in got}) == 100


def _priority(native: object) -> int:
    return int(native.properties().get("p", "0"))  # type: ignore[attr-defined]


async def test_an_ordered_consumer_takes_the_highest_priority_it_holds(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    name = topic("ordered")
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    await admin.create_subscription(name, "q", "earliest")
    priorities = [0, 3, 1, 3, 2, 0, 5, 1, 2, 2, 9, 0, 4, 4, 3, 1, 0, 7, 5, 6]
    for i, priority in enumerate(priorities):
        await producer.send(f"{priority}-{i}".encode(), {"p": str(priority)})
    # The bound applies as before: 8 in the trio-side buffer, the rest waits in Pulsar.
    options = ConsumerOptions(receiver_queue_size=2, buffer_size=8, priority_of=_priority)
    consumer = await client.subscribe(name, "q", options)
    with trio.fail_after(20):
        await consumer.wait_buffered(8)
    assert consumer.buffered == 8 and consumer.paused
    first_eight = sorted(enumerate(priorities[:8]), key=lambda item: (-item[1], item[0]))
    got = [(await receive_n(consumer, 1, ack=False))[0] for _ in range(2)]
    assert [m.payload for m in got] == [f"{p}-{i}".encode() for i, p in first_eight[:2]]
    # A message put back goes to the front of its priority.
    assert consumer.put_back(got[0])
    again = (await receive_n(consumer, 1))[0]
    assert again.payload == got[0].payload
    consumer.acknowledge(got[1])
    rest = await receive_n(consumer, len(priorities) - 2)
    bodies = [got[1].payload, again.payload, *(m.payload for m in rest)]
    assert sorted(bodies) == sorted(f"{p}-{i}".encode() for i, p in enumerate(priorities))
    # Once closed, nothing goes back into it.
    await consumer.aclose()
    assert not consumer.put_back(got[1])


async def test_an_unordered_consumer_refuses_put_back(client: PulsarClient, topic: Topic) -> None:
    name = topic("unordered")
    consumer = await client.subscribe(name, "q")
    producer = await client.create_producer(name)
    await publish(producer, 1)
    message = (await receive_n(consumer, 1))[0]
    assert not consumer.put_back(message)


async def test_multi_topic_consumer_one_subscription_acks_route_to_each_topic(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    names = [topic("multi-a"), topic("multi-b"), topic("multi-c")]
    for name in names:
        await admin.create_topic(name)
    consumer = await client.subscribe(names, "queue-1", ConsumerOptions(receiver_queue_size=10))
    for name in names:
        assert "queue-1" in await admin.list_subscriptions(name)
    sent: set[tuple[str, bytes]] = set()
    for name in names:
        producer = await client.create_producer(name)
        sent.update((name, body) for body in await publish(producer, 40, prefix=name[-1]))
    got = await receive_n(consumer, 120)
    assert {(m.topic, m.payload) for m in got} == sent

    async def all_acked() -> bool:
        backlogs = [await admin.subscription_backlog(n, "queue-1") for n in names]
        return backlogs == [0, 0, 0]

    await wait_for(all_acked)


async def test_multi_topic_buffering_is_bounded_too(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    names = [topic("bound-a"), topic("bound-b"), topic("bound-c")]
    for name in names:
        await admin.create_subscription(name, "q", "earliest")
        producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
        await publish(producer, 60)
    consumer = await client.subscribe(
        names, "q", ConsumerOptions(receiver_queue_size=5, buffer_size=8)
    )
    dispatched: list[int] = []

    async def settled() -> bool:
        stats = [await admin.topic_stats(name) for name in names]
        dispatched.append(sum(s.subscriptions["q"].unacked_messages for s in stats))
        return consumer.paused and len(dispatched) > 2 and dispatched[-1] == dispatched[-3]

    await wait_for(settled)
    # The message that filled the buffer paused every per-topic consumer attached by then; a
    # topic whose subscribe completed afterwards delivers one message, which pauses it
    # (native/listener.c, ``on_message``; consumer.py, ``_pause``). So each topic but the first
    # may add one.
    assert 8 <= consumer.buffered <= 8 + len(names) - 1
    assert dispatched[-1] <= 8 + 3 * 5
    got = await receive_n(consumer, 180)
    assert len({(m.topic, m.message_id) for m in got}) == 180


async def test_topics_can_be_added_and_removed_while_consuming(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    first, second = topic("dyn-a"), topic("dyn-b")
    consumer = await client.subscribe(first, "q")
    await consumer.add_topic(second)
    await consumer.add_topic(second)  # no-op
    assert consumer.topics == (first, second)
    producers = [await client.create_producer(name) for name in (first, second)]
    await producers[0].send(b"a1")
    await producers[1].send(b"b1")
    got = await receive_n(consumer, 2)
    assert {(m.topic, m.payload) for m in got} == {(first, b"a1"), (second, b"b1")}
    await producers[1].send(b"b2")

    async def buffered() -> bool:
        return consumer.buffered == 1

    await wait_for(buffered)
    assert await consumer.remove_topic(second) == 1  # the buffered b2 is dropped ...
    assert list(consumer.topics) == [first]
    assert await admin.subscription_backlog(second, "q") == 1  # ... and stays in Pulsar
    await producers[0].send(b"a2")
    assert [m.payload for m in await receive_n(consumer, 1)] == [b"a2"]
    assert await consumer.remove_topic(second) == 0


async def test_exclusive_subscription_refuses_a_second_consumer(
    client: PulsarClient, topic: Topic
) -> None:
    name = topic("exclusive")
    options = ConsumerOptions(subscription_type="exclusive")
    await client.subscribe(name, "only", options)
    with pytest.raises(PulsarClientError) as info:
        await client.subscribe(name, "only", options)
    assert info.value.result == "ConsumerBusy"


async def test_stop_receiving_hands_buffered_messages_to_other_consumers(
    client: PulsarClient, topic: Topic
) -> None:
    name = topic("stop")
    first = await client.subscribe(name, "q", ConsumerOptions(receiver_queue_size=5))
    producer = await client.create_producer(name, ProducerOptions(batching_enabled=False))
    await publish(producer, 10)
    delivered = await receive_n(first, 2, ack=False)

    async def buffered() -> bool:
        return first.buffered > 0

    await wait_for(buffered)
    second = await client.subscribe(name, "q", ConsumerOptions(receiver_queue_size=20))
    handed_back = first.stop_receiving()
    assert handed_back > 0 and first.buffered == 0
    for message in delivered:  # deliveries made before stopping can still be settled
        first.acknowledge(message)
    await first.aclose()  # what sat in its C++ queue goes back too
    got = await receive_n(second, 8)
    assert sorted(m.payload for m in got) == sorted(f"m{i}".encode() for i in range(2, 10))


async def test_async_iteration_ends_when_the_consumer_closes(
    client: PulsarClient, topic: Topic
) -> None:
    consumer = await client.subscribe(topic("iter"), "q")
    seen: list[ReceivedMessage] = []

    async def iterate() -> None:
        async for message in consumer:
            seen.append(message)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(iterate)
            await trio.testing.wait_all_tasks_blocked()
            await consumer.aclose()
    assert seen == []
    with pytest.raises(ClosedError):
        await consumer.receive()
    with pytest.raises(ClosedError):
        consumer.receive_nowait()


async def test_acks_right_before_close_are_not_lost(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    name = topic("ack-close")
    consumer = await client.subscribe(name, "q")
    producer = await client.create_producer(name)
    await publish(producer, 20)
    await receive_n(consumer, 20)  # acknowledged one by one ...
    await consumer.aclose()  # ... and closed within pulsar-client's 100 ms ack grouping window
    assert await admin.subscription_backlog(name, "q") == 0
    again = await client.subscribe(name, "q")
    with trio.move_on_after(0.5):
        message = await again.receive()
        pytest.fail(f"acknowledged message redelivered: {message}")


async def test_subscribing_several_topics_is_all_or_nothing(
    client: PulsarClient, admin: PulsarAdmin, topic: Topic
) -> None:
    free, busy = topic("free"), topic("busy")
    options = ConsumerOptions(subscription_type="exclusive")
    await client.subscribe(busy, "q", options)
    with pytest.raises(PulsarClientError) as info:
        await client.subscribe([free, busy], "q", options)
    assert info.value.result == "ConsumerBusy"
    # The consumer that did get `free` was closed again.
    assert (await admin.topic_stats(free)).subscriptions["q"].consumer_count == 0


def _native_multi_topic_round_trip(broker_url: str, names: list[str]) -> list[int]:
    """pulsar-client's own multi-topic consumer (not used by TrioConsumer; see the docs)."""
    client = pulsar.Client(broker_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        consumer = client.subscribe(names, "multi", consumer_type=pulsar.ConsumerType.Shared)
        for name in names:
            producer = client.create_producer(name)
            for i in range(10):
                producer.send(f"{name}-{i}".encode())
        seen = []
        for _ in range(10 * len(names)):
            message = consumer.receive(10_000)
            seen.append(message.topic_name())
            consumer.acknowledge(message)
        consumer.close()  # flushes the acks
        return [seen.count(name) for name in names]
    finally:
        client.close()


async def test_pulsar_client_multi_topic_consumer_routes_acks_per_topic(
    pulsar_stack: StackEndpoints, admin: PulsarAdmin, topic: Topic
) -> None:
    names = [topic("native-a"), topic("native-b")]
    counts = await trio.to_thread.run_sync(
        _native_multi_topic_round_trip, pulsar_stack.broker_url, names
    )
    assert counts == [10, 10]
    for name in names:  # one subscription name, created on every topic, acks routed right
        assert await admin.subscription_backlog(name, "multi") == 0


async def test_properties_with_a_nul_character_arrive_whole(
    client: PulsarClient, topic: Topic
) -> None:
    """Pulsar's C API (the compiled module) would cut them at the NUL: such messages go
    through the binding, their properties escaped too (gateway/pulsar/nul_properties.py)."""
    name = topic("nul")
    consumer = await client.subscribe(name, "q")
    producer = await client.create_producer(name)
    odd = {"value": "a\0b", "k\0ey": "v", "plain": "p"}
    # One task, no yield in between: grouped sends of both kinds, in order.
    handles = [
        await producer.submit_grouped(b"g0", {"plain": "p"}),
        await producer.submit_grouped(b"g1", odd),
        await producer.submit_grouped(b"g2", {"plain": "p"}),
    ]
    for handle in handles:
        await handle.durable()
    await producer.send(b"s", odd)
    got = await receive_n(consumer, 4)
    assert [m.payload for m in got] == [b"g0", b"g1", b"g2", b"s"]
    assert [m.properties for m in got] == [{"plain": "p"}, odd, {"plain": "p"}, odd]
    # The three at once (the delivery path's one call into the compiled module) say the same.
    assert [m.contents() for m in got] == [(name, m.payload, m.properties) for m in got]
    await producer.aclose()


async def test_a_closed_consumer_is_freed(client: PulsarClient, topic: Topic) -> None:
    """The compiled listener holds the consumer's waker from C, where the garbage collector
    cannot see: it must not keep the consumer alive (pulsar/bridge.py, ``weakly``)."""
    name = topic("freed")
    consumer = await client.subscribe(name, "q")
    producer = await client.create_producer(name)
    await publish(producer, 3)
    (message,) = await receive_n(consumer, 1)
    await consumer.aclose()
    freed = weakref.ref(consumer)
    del consumer, message

    # Both listeners hold the consumer weakly: pulsar-client's binding keeps its listener
    # until it destroys the C++ consumer, on its own thread at a time of its choosing (it held
    # one for over 30 s under the whole suite's load). A moment for callbacks in flight.
    async def collected() -> bool:
        gc.collect()
        return freed() is None

    await wait_for(collected, timeout=5)
    await producer.aclose()
