"""Single active consumer (``x-single-active-consumer``) with real clients, on both backends.

RabbitMQ (docs "Consumers" → "Single Active Consumer", ``rabbit_amqqueue_process`` and
``rabbit_fifo``): every consumer of such a queue is registered, but only one gets messages;
the first registered is active; when it is cancelled or its channel or connection closes, the
next one becomes active and gets what is left, the unacknowledged messages of the previous one
first, marked redelivered. With consumer priorities, a classic queue picks the next one by
priority then registration order (a later consumer never takes over); a quorum queue lets a
waiting consumer of higher priority take over once the active one's deliveries are settled.
Exclusive consumers are refused on classic SAC queues; Basic.Get is refused on quorum ones.
"""

from __future__ import annotations

import asyncio
import time

import aio_pika
import pika
import pytest

from tests.integration.clients.conftest import Running
from tests.support.clients import DEFAULT_TIMEOUT, amqp_url, channel_closed, unique
from tests.support.consumers import bodies, consume, publish, pump, settle_window

SAC = {"x-single-active-consumer": True}
QUORUM_SAC = {**SAC, "x-queue-type": "quorum"}


def test_only_the_first_consumer_gets_messages_then_the_next_takes_over(
    running: Running,
) -> None:
    queue = unique("sac")
    a, b, producer = running.connect(), running.connect(), running.connect()
    a.channel().queue_declare(queue, arguments=SAC)
    first = consume(a.channel(), queue, prefetch=5)
    second = consume(b.channel(), queue, auto_ack=True)
    # Both are registered: Declare-Ok counts them.
    assert producer.channel().queue_declare(queue, passive=True).method.consumer_count == 2
    sent = bodies(20)
    publish(producer.channel(), queue, sent)
    pump([a, b], lambda: len(first.got) == 5, what=lambda: f"5 deliveries, {len(first.got)}")
    settle_window([a, b])
    assert second.got == []  # waiting, although the active one's prefetch is full
    assert first.bodies == sent[:5]
    # Ack three, hold the next five unacknowledged, then cancel: the next consumer becomes
    # active and gets the five first (redelivered), then the rest, in order.
    for _body, _redelivered, tag in first.got[:3]:
        first.channel.basic_ack(tag)
    pump([a, b], lambda: len(first.got) == 8, what=lambda: f"8 deliveries, {len(first.got)}")
    first.channel.basic_cancel(first.tag)
    pump([a, b], lambda: len(second.got) >= 17, what=lambda: f"17 at the second: {second.got}")
    settle_window([a, b])
    assert second.bodies == sent[3:]
    assert [redelivered for _, redelivered, _ in second.got] == [True] * 5 + [False] * 12
    for connection in (a, b, producer):
        connection.close()


@pytest.mark.parametrize("leaving", ["cancel", "channel", "connection"])
def test_the_next_consumer_takes_over_when_the_active_one_goes(
    running: Running, leaving: str
) -> None:
    queue = unique("sac")
    a, b, c, producer = (running.connect() for _ in range(4))
    producer.channel().queue_declare(queue, arguments=SAC)
    first = consume(a.channel(), queue, prefetch=2)
    second = consume(b.channel(), queue, auto_ack=True)
    third = consume(c.channel(), queue, auto_ack=True)
    sent = bodies(6)
    publish(producer.channel(), queue, sent)
    pump([a, b, c], lambda: len(first.got) == 2, what="the first consumer's prefetch")
    if leaving == "cancel":
        first.channel.basic_cancel(first.tag)
    elif leaving == "channel":
        first.channel.close()
    else:
        a.close()
    pump([a, b, c], lambda: len(second.got) == 6, what=lambda: f"6 at the second: {second.got}")
    settle_window([a, b, c])
    assert second.bodies == sent
    assert [redelivered for _, redelivered, _ in second.got] == [True] * 2 + [False] * 4
    assert third.got == []  # still waiting: registered after the second
    for connection in (a, b, c, producer):
        if connection.is_open:
            connection.close()


def test_a_consumer_that_registers_later_waits_behind_the_others(running: Running) -> None:
    queue = unique("sac")
    a, b, producer = running.connect(), running.connect(), running.connect()
    producer.channel().queue_declare(queue, arguments=SAC)
    first = consume(a.channel(), queue, auto_ack=True)
    publish(producer.channel(), queue, [b"before"])
    pump([a], lambda: first.bodies == [b"before"], what="the first delivery")
    second = consume(b.channel(), queue, auto_ack=True)
    publish(producer.channel(), queue, [b"after"])
    pump([a, b], lambda: len(first.got) == 2, what="the second delivery")
    settle_window([a, b])
    assert first.bodies == [b"before", b"after"]
    assert second.got == []
    a.close()
    publish(producer.channel(), queue, [b"last"])
    pump([b], lambda: second.bodies == [b"last"], what="a delivery to the second")
    b.close()
    producer.close()


def test_basic_get_on_a_classic_queue_takes_from_the_queue(running: Running) -> None:
    """RabbitMQ's classic queue answers Basic.Get whatever its consumers (basic_get does not
    look at the single active consumer)."""
    queue = unique("sac")
    connection = running.connect()
    channel = connection.channel()
    channel.queue_declare(queue, arguments=SAC)
    publish(channel, queue, [b"one", b"two"])
    _, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"one"
    connection.close()


def test_basic_get_on_a_quorum_queue_is_refused(running: Running) -> None:
    queue = unique("sac")
    connection = running.connect()
    connection.channel().queue_declare(queue, durable=True, arguments=QUORUM_SAC)
    text = (
        f"RESOURCE_LOCKED - cannot obtain access to locked queue '{queue}' in vhost '/'. "
        'basic.get operations are not supported by <<"quorum">> queues with single active '
        "consumer"
    )
    with channel_closed(405, text):
        connection.channel().basic_get(queue, auto_ack=True)
    connection.close()


def test_exclusive_consumers(running: Running) -> None:
    """A classic SAC queue refuses them (even without consumers); a quorum one ignores the
    flag: the consumer joins the line like the others."""
    classic, quorum = unique("sac"), unique("sac-quorum")
    connection = running.connect()
    connection.channel().queue_declare(classic, arguments=SAC)
    text = f"ACCESS_REFUSED - queue '{classic}' in vhost '/' in exclusive use"
    with channel_closed(403, text):
        connection.channel().basic_consume(classic, lambda *_: None, exclusive=True)
    channel = connection.channel()
    channel.queue_declare(quorum, durable=True, arguments=QUORUM_SAC)
    first = consume(channel, quorum, auto_ack=True)
    channel.basic_consume(quorum, lambda *_: None, exclusive=True)
    assert channel.queue_declare(quorum, passive=True).method.consumer_count == 2
    publish(channel, quorum, [b"m"])
    pump([connection], lambda: first.bodies == [b"m"], what="a delivery to the first")
    connection.close()


def test_the_argument_is_checked_and_compared_on_redeclare(running: Running) -> None:
    queue = unique("sac")
    connection = running.connect()
    reason = "{unacceptable_type,longstr}"
    text = (
        f"PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue '{queue}' in "
        f"vhost '/': {reason}"
    )
    with channel_closed(406, text):
        connection.channel().queue_declare(queue, arguments={"x-single-active-consumer": "yes"})
    channel = connection.channel()
    channel.queue_declare(queue, arguments=SAC)
    channel.queue_declare(queue, arguments=SAC)  # equivalent
    text = (
        f"PRECONDITION_FAILED - inequivalent arg 'x-single-active-consumer' for queue "
        f"'{queue}' in vhost '/': received none but current is the value 'true' of type 'bool'"
    )
    with channel_closed(406, text):
        connection.channel().queue_declare(queue)
    connection.close()


def test_false_is_an_ordinary_queue(running: Running) -> None:
    queue = unique("not-sac")
    a, b, producer = running.connect(), running.connect(), running.connect()
    producer.channel().queue_declare(queue, arguments={"x-single-active-consumer": False})
    first = consume(a.channel(), queue, prefetch=1)
    second = consume(b.channel(), queue, prefetch=1)
    publish(producer.channel(), queue, bodies(4))
    # Neither acks: each holds its prefetch, so both got one.
    pump([a, b], lambda: len(first.got) == 1 and len(second.got) == 1, what="one each")
    for connection in (a, b, producer):
        connection.close()


def test_deleting_the_queue_cancels_every_consumer(running: Running) -> None:
    queue = unique("sac")
    a, b, producer = running.connect(), running.connect(), running.connect()
    producer.channel().queue_declare(queue, arguments=SAC)
    cancelled: list[str] = []
    for connection in (a, b):
        channel = connection.channel()
        channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        consume(channel, queue, auto_ack=True)
    producer.channel().queue_delete(queue)
    pump([a, b], lambda: len(cancelled) == 2, what=lambda: f"two Basic.Cancel, {cancelled}")
    for connection in (a, b, producer):
        connection.close()


def test_an_auto_delete_queue_goes_with_its_last_consumer(running: Running) -> None:
    queue = unique("sac")
    a, b, observer = running.connect(), running.connect(), running.connect()
    a.channel().queue_declare(queue, auto_delete=True, arguments=SAC)
    consume(a.channel(), queue, auto_ack=True)
    consume(b.channel(), queue, auto_ack=True)
    a.close()  # the active one goes; the waiting one keeps the queue
    assert observer.channel().queue_declare(queue, passive=True).method.consumer_count == 1
    b.close()

    def gone() -> bool:
        try:
            observer.channel().queue_declare(queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker as closed:
            return closed.reply_code == 404
        return False

    pump([observer], gone, what="the auto-delete queue deleted")
    observer.close()


# ---------------------------------------------------------------------- with consumer priorities


def test_classic_queue_picks_the_next_by_priority_and_never_preempts(running: Running) -> None:
    queue = unique("sac")
    a, b, c, producer = (running.connect() for _ in range(4))
    producer.channel().queue_declare(queue, arguments=SAC)
    first = consume(a.channel(), queue, auto_ack=True)
    second = consume(b.channel(), queue, auto_ack=True)  # priority 0, registered before
    third = consume(c.channel(), queue, auto_ack=True, arguments={"x-priority": 5})
    publish(producer.channel(), queue, [b"one"])
    pump([a, b, c], lambda: first.bodies == [b"one"], what="a delivery to the first")
    settle_window([a, b, c])
    assert second.got == third.got == []  # a later, higher consumer does not take over
    a.close()
    publish(producer.channel(), queue, [b"two"])
    pump([b, c], lambda: third.bodies == [b"two"], what="a delivery to the highest priority")
    settle_window([b, c])
    assert second.got == []
    for connection in (b, c, producer):
        connection.close()


def test_quorum_queue_hands_over_to_a_higher_priority_once_settled(running: Running) -> None:
    queue = unique("sac-quorum")
    a, c, producer = running.connect(), running.connect(), running.connect()
    producer.channel().queue_declare(queue, durable=True, arguments=QUORUM_SAC)
    first = consume(a.channel(), queue, prefetch=2)
    sent = bodies(6)
    publish(producer.channel(), queue, sent)
    pump([a], lambda: len(first.got) == 2, what="the first consumer's prefetch")
    higher = consume(c.channel(), queue, auto_ack=True, arguments={"x-priority": 3})
    # The active one quiesces: nothing new, also not once it acks one (it still holds one).
    first.channel.basic_ack(first.got[0][2])
    settle_window([a, c])
    assert len(first.got) == 2
    assert higher.got == []
    first.channel.basic_ack(first.got[1][2])  # all settled: the higher one takes over
    pump([a, c], lambda: len(higher.got) == 4, what=lambda: f"4 at the higher: {higher.got}")
    assert higher.bodies == sent[2:]
    assert len(first.got) == 2
    # The first is waiting again, and active again once the higher one goes.
    c.close()
    publish(producer.channel(), queue, [b"again"])
    pump([a], lambda: first.bodies[-1:] == [b"again"], what="the first active again")
    a.close()
    producer.close()


def test_quorum_queue_prefers_more_credit_among_equals(running: Running) -> None:
    """rabbit_fifo orders waiting consumers of one priority by credit (their prefetch), then
    by registration."""
    queue = unique("sac-quorum")
    a, b, c, producer = (running.connect() for _ in range(4))
    producer.channel().queue_declare(queue, durable=True, arguments=QUORUM_SAC)
    consume(a.channel(), queue, auto_ack=True)
    small = consume(b.channel(), queue, prefetch=1)
    large = consume(c.channel(), queue, prefetch=10)
    a.close()
    publish(producer.channel(), queue, [b"m"])
    pump([b, c], lambda: large.bodies == [b"m"], what="a delivery to the larger prefetch")
    assert small.got == []
    for connection in (b, c, producer):
        connection.close()


# ---------------------------------------------------------------------- aio-pika


def test_aio_pika_standby_takes_over_in_order(running: Running) -> None:
    async def scenario() -> None:
        url = amqp_url(running.port)
        queue_name = unique("sac")
        async with (
            await aio_pika.connect(url) as active,
            await aio_pika.connect(url) as standby,
            await aio_pika.connect(url) as producer,
        ):
            channel = await producer.channel(publisher_confirms=True)
            await channel.declare_queue(queue_name, arguments=SAC)
            active_channel = await active.channel()
            await active_channel.set_qos(prefetch_count=3)
            active_queue = await active_channel.get_queue(queue_name)
            standby_queue = await (await standby.channel()).get_queue(queue_name)
            got_active: list[aio_pika.abc.AbstractIncomingMessage] = []
            got_standby: list[tuple[bytes, bool]] = []
            done = asyncio.Event()

            async def on_standby(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got_standby.append((message.body, message.redelivered))
                await message.ack()
                if len(got_standby) == 9:
                    done.set()

            async def on_active(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                got_active.append(message)

            await active_queue.consume(on_active)
            await standby_queue.consume(on_standby)
            for body in bodies(10):
                await channel.default_exchange.publish(aio_pika.Message(body), queue_name)
            deadline = time.monotonic() + DEFAULT_TIMEOUT
            while len(got_active) < 3:
                assert time.monotonic() < deadline, "the active consumer's prefetch"
                await asyncio.sleep(0.02)
            assert got_standby == []
            await got_active[0].ack()
            while len(got_active) < 4:  # the ack let one more in
                assert time.monotonic() < deadline, "the active consumer's fourth"
                await asyncio.sleep(0.02)
            await active_channel.close()  # three unacknowledged go back
            await asyncio.wait_for(done.wait(), DEFAULT_TIMEOUT)
            assert [body for body, _ in got_standby] == bodies(10)[1:]
            assert [flag for _, flag in got_standby] == [True] * 3 + [False] * 6

    asyncio.run(scenario())
