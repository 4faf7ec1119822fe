"""Three behaviours RabbitMQ's Java client functional tests check (issue 34), with pika.

The Java client's suite (rabbitmq-java-client, ``src/test/java/.../test/functional``) found them
on the gateway; these are our own tests of the same behaviour, not ports of that code:

- RequeueOnClose (RequeueOnChannelClose / RequeueOnConnectionClose): 2,000 messages in flight
  to a consumer with manual acknowledgements come back, all of them, when its channel or its
  connection closes, and all but the acknowledged ones after a Basic.Cancel and the close;
  a Basic.Get'd message not acknowledged comes back too, an acknowledged one does not. The
  Java test allows 60 s; the time is printed, not asserted.
- BindingLifecycle.unackedPurge: Queue.Purge removes only the ready messages. A delivery not yet
  acknowledged is not the queue's to purge: Basic.Recover (or the channel's close) returns it,
  redelivered, and a purge after that removes it.
- BindingLifecycle.exchangeAutoDeleteManyBindings (doAutoDelete with 10 queues): an auto-delete
  exchange with ten bindings of the same key outlives the auto-delete queue that goes away, is
  still there to bind to, and goes when its last binding goes; every request is answered.
  On Pulsar the queue declared again under the auto-deleted one's name found a message routed
  to the old queue (fixed in backend/pulsar/vhost.py: a deletion closes the queue's
  cancelled consumers still closing before it removes the subscriptions).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import unique, wait_for

IN_FLIGHT = 2000  # RequeueOnClose's MESSAGE_COUNT
JAVA_TEST_TIMEOUT = 60.0  # what the Java test allows (and its suite's per-test limit)
GET_ROUNDS = 3  # RequeueOnClose.publishAndGet's repeats
BOUND_QUEUES = 10  # exchangeAutoDeleteManyBindings: doAutoDelete(false, 10)


# ---------------------------------------------------------------- requeue on close (RequeueOnClose)


def publish_confirmed(channel: BlockingChannel, queue: str, count: int) -> None:
    """``count`` messages, each one's confirm awaited before the next is sent (pika's
    BlockingChannel in confirm mode waits for Basic.Ack on every publish)."""
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", queue, f"in flight {n}".encode())


Delivery = tuple[bytes, bool]  # body, redelivered


def consume_all(
    connection: pika.BlockingConnection, queue: str, count: int, *, timeout: float
) -> tuple[BlockingChannel, list[Delivery]]:
    """A channel whose consumer (manual acknowledgements, no prefetch limit) has received
    ``count`` messages of ``queue`` and acknowledged none."""
    channel = connection.channel()
    received: list[Delivery] = []
    channel.basic_consume(
        queue, lambda _c, method, _p, body: received.append((body, bool(method.redelivered)))
    )
    wait_for(
        lambda: len(received) >= count,
        connection,
        timeout=timeout,
        what=lambda: f"{count} deliveries, {len(received)} came",
    )
    return channel, received


def assert_all_redelivered(received: list[Delivery]) -> None:
    assert len(received) == IN_FLIGHT
    assert sorted(body for body, _ in received) == sorted(
        f"in flight {n}".encode() for n in range(IN_FLIGHT)
    )
    first_time = [body for body, redelivered in received if not redelivered]
    assert first_time == [], f"{len(first_time)} of {IN_FLIGHT} not flagged redelivered"


def get_all_at_once(channel: BlockingChannel, queue: str) -> list[Delivery]:
    """Basic.Get (auto-ack) until Get-Empty, with no waiting: what RequeueOnClose checks
    right after the close (RabbitMQ requeues before Close-Ok)."""
    got: list[Delivery] = []
    while (message := channel.basic_get(queue, auto_ack=True))[0] is not None:
        got.append((message[2], bool(message[0].redelivered)))
    return got


def in_flight_then_closed(
    running: Running, close: Callable[[pika.BlockingConnection, BlockingChannel], None]
) -> None:
    """Publish, hold every message in flight, ``close`` the holder; a new consumer receives
    them all, redelivered. It holds them in turn, and closes its channel: at once after
    Close-Ok, Basic.Get finds every one of them, and nothing more."""
    started = time.monotonic()
    holder = running.connect()
    channel = holder.channel()
    queue = unique("requeue-on-close")
    channel.queue_declare(queue, durable=True)
    publish_confirmed(channel, queue, IN_FLIGHT)
    published = time.monotonic()
    held_by, held = consume_all(holder, queue, IN_FLIGHT, timeout=JAVA_TEST_TIMEOUT)
    assert not any(redelivered for _, redelivered in held)
    close(holder, held_by)
    closed = time.monotonic()
    with running.connect() as again:
        consumer, back = consume_all(again, queue, IN_FLIGHT, timeout=JAVA_TEST_TIMEOUT)
        back_at = time.monotonic()
        assert_all_redelivered(back)
        consumer.close()
        getter = again.channel()
        assert_all_redelivered(get_all_at_once(getter, queue))
        getter.queue_delete(queue)
    if holder.is_open:
        holder.close()
    print(
        f"{running.backend}: published {IN_FLIGHT} (a confirm each) in {published - started:.1f}s,"
        f" all back {back_at - closed:.1f}s after the close; {time.monotonic() - started:.1f}s"
        " in all"
    )


def test_in_flight_messages_come_back_when_their_channel_closes(running: Running) -> None:
    in_flight_then_closed(running, lambda _connection, channel: channel.close())


def test_in_flight_messages_come_back_when_their_connection_closes(running: Running) -> None:
    in_flight_then_closed(running, lambda connection, _channel: connection.close())


ACKED_FIRST = 20  # RequeueOnClose's MESSAGES_TO_CONSUME


def test_in_flight_messages_but_those_acknowledged_come_back_after_cancel_and_close(
    running: Running,
) -> None:
    """RequeueOnClose.publishLotsAndConsumeSome(ack, cancelBeforeFinish): the consumer
    acknowledges the first 20 and is cancelled while the rest are in flight to it; after the
    channel's close, Basic.Get at once finds the other 1,980, and nothing more."""
    connection = running.connect()
    channel = connection.channel()
    queue = unique("consume-some")
    channel.queue_declare(queue, durable=True)
    publish_confirmed(channel, queue, IN_FLIGHT)
    consumer = connection.channel()
    acknowledged: list[bytes] = []

    def first_acknowledged(
        on: BlockingChannel, method: pika.spec.Basic.Deliver, _p: object, body: bytes
    ) -> None:
        if len(acknowledged) < ACKED_FIRST:
            on.basic_ack(method.delivery_tag)
            acknowledged.append(body)

    tag = consumer.basic_consume(queue, first_acknowledged)
    wait_for(lambda: len(acknowledged) == ACKED_FIRST, connection, what="20 deliveries")
    consumer.basic_cancel(tag)
    consumer.close()
    back = sorted(body for body, _ in get_all_at_once(channel, queue))
    expected = sorted({f"in flight {n}".encode() for n in range(IN_FLIGHT)} - set(acknowledged))
    assert len(back) == IN_FLIGHT - ACKED_FIRST
    assert back == expected
    channel.queue_delete(queue)
    connection.close()


@pytest.mark.parametrize("acknowledged", [True, False], ids=["acked", "unacked"])
@pytest.mark.parametrize("scope", ["channel", "connection"])
def test_a_got_message_comes_back_unless_acknowledged(
    running: Running, scope: str, acknowledged: bool
) -> None:
    """RequeueOnClose.publishAndGet: Basic.Get with no-ack=false, then the close; the next
    Basic.Get, at once on the reopened channel, finds the message exactly when it was not
    acknowledged."""
    connection = running.connect()
    queue = unique("get-then-close")
    connection.channel().queue_declare(queue)
    for round_ in range(GET_ROUNDS):
        channel = connection.channel()
        channel.queue_purge(queue)
        channel.basic_publish("", queue, b"requeue on close")
        method, _, body = channel.basic_get(queue, auto_ack=False)
        assert body == b"requeue on close", f"round {round_}"
        if acknowledged:
            channel.basic_ack(method.delivery_tag)
        if scope == "channel":
            channel.close()
        else:
            connection.close()
            connection = running.connect()
        method, _, body = connection.channel().basic_get(queue, auto_ack=True)
        if acknowledged:
            assert body is None, f"round {round_}: an acknowledged message came back"
        else:
            assert body == b"requeue on close", f"round {round_}: the message did not come back"
            assert method.redelivered
    connection.channel().queue_delete(queue)
    connection.close()


# ---------------------------------------------- purge with unacknowledged deliveries (unackedPurge)


def bound_queue(channel: BlockingChannel) -> tuple[str, str, str]:
    """A durable queue bound to a direct exchange; (queue, exchange, routing key)."""
    queue, exchange, key = unique("purged"), unique("purge-x"), unique("k")
    channel.exchange_declare(exchange, "direct")
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, key)
    return queue, exchange, key


def test_purge_leaves_unacknowledged_deliveries_to_basic_recover(running: Running) -> None:
    with running.connect() as connection:
        channel = connection.channel()
        queue, exchange, key = bound_queue(channel)
        channel.basic_publish(exchange, key, b"unacked purge")
        method, _, body = channel.basic_get(queue, auto_ack=False)
        assert body == b"unacked purge" and not method.redelivered

        assert channel.queue_purge(queue).method.message_count == 0  # nothing was ready
        assert channel.basic_get(queue, auto_ack=True)[0] is None

        channel.basic_recover(requeue=True)
        method, _, body = channel.basic_get(queue, auto_ack=False)
        assert body == b"unacked purge", "the purge removed a delivery not yet acknowledged"
        assert method.redelivered
        channel.basic_recover(requeue=True)

        # Requeued, it is ready again: now a purge removes it.
        assert channel.queue_purge(queue).method.message_count == 1
        assert channel.basic_get(queue, auto_ack=True)[0] is None
        channel.queue_delete(queue)
        channel.exchange_delete(exchange)


def test_purge_leaves_a_consumers_unacknowledged_deliveries_to_its_channels_close(
    running: Running,
) -> None:
    """The same with a consumer holding several deliveries and its channel closing: the purge
    removes the ready ones only, and those held are all back, redelivered, after the close."""
    with running.connect() as connection:
        channel = connection.channel()
        queue, exchange, key = bound_queue(channel)
        for n in range(5):
            channel.basic_publish(exchange, key, f"held {n}".encode())
        holder = connection.channel()
        holder.basic_qos(prefetch_count=3)
        held: list[bytes] = []
        holder.basic_consume(queue, lambda _c, _m, _p, body: held.append(body))
        wait_for(lambda: len(held) == 3, connection, what="3 deliveries")

        assert channel.queue_purge(queue).method.message_count == 2
        holder.close()

        back: list[tuple[bytes, bool]] = []
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            back.append((got[2], bool(got[0].redelivered)))
        assert sorted(back) == sorted((body, True) for body in held)
        channel.queue_delete(queue)
        channel.exchange_delete(exchange)


# ------------------------------------ auto-delete exchange, many bindings (doAutoDelete(false, 10))


def exchange_exists(connection: pika.BlockingConnection, exchange: str) -> bool:
    channel = connection.channel()
    try:
        channel.exchange_declare(exchange, passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    channel.close()
    return True


def queue_exists(connection: pika.BlockingConnection, queue: str) -> bool:
    channel = connection.channel()
    try:
        channel.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    channel.close()
    return True


def test_an_auto_delete_exchange_with_many_bindings_goes_with_its_last_binding(
    running: Running,
) -> None:
    """doAutoDelete(false, 10), then the exchange's end: its last binding's going takes it.

    On RabbitMQ a message published to a queue with a consumer ready goes to the consumer at
    once, so a Basic.Get right after it finds nothing, as the Java test asserts; on the memory
    backend the Get may come first (its deliveries are a task's), so that is checked on Pulsar
    only, and the count of what arrived allows for what the Gets took."""
    connection = running.connect()
    channel = connection.channel()
    exchange, key, first = unique("auto-x"), unique("k"), unique("auto-q")
    channel.exchange_declare(exchange, "direct", auto_delete=True)
    channel.queue_declare(first, exclusive=True, auto_delete=True)
    channel.queue_bind(first, exchange, key)
    others = [unique("bound") for _ in range(BOUND_QUEUES - 1)]
    consumed: list[bytes] = []
    for queue in others:
        channel.queue_declare(queue, exclusive=True)
        channel.queue_bind(queue, exchange, key)
        channel.basic_consume(queue, lambda _c, _m, _p, body: consumed.append(body), auto_ack=True)

    def get_finds_nothing(queue: str) -> int:
        """1 if a Basic.Get took a message from ``queue`` (fails on Pulsar)."""
        method = channel.basic_get(queue, auto_ack=True)[0]
        assert method is None or not running.pulsar, f"a Get took {queue}'s message"
        return 0 if method is None else 1

    # The first queue's only consumer takes a message, then cancels: the queue is deleted,
    # its binding with it; the exchange keeps the nine others.
    tag = channel.basic_consume(first, lambda _c, _m, _p, _b: None)
    channel.basic_publish(exchange, key, b"to all ten")
    get_finds_nothing(first)
    channel.basic_cancel(tag)
    taken = 0
    for queue in others:  # a second consumer on each; what is published goes to them
        channel.basic_consume(queue, lambda _c, _m, _p, body: consumed.append(body), auto_ack=True)
        channel.basic_publish(exchange, key, b"consumed")
        taken += get_finds_nothing(queue)
    wait_for(lambda: not queue_exists(connection, first), connection, what=f"{first} deleted")
    assert exchange_exists(connection, exchange)

    # Declared and bound again, the queue is new and empty, and routed to: the exchange is
    # still there. A Get right after the publish on the same channel finds the message. (On
    # Pulsar the old queue's subscription, re-created by its consumer's reconnection when the
    # auto-delete removed it mid-close, was the new queue's, with the "consumed" messages.)
    channel.queue_declare(first, exclusive=True, auto_delete=True)
    channel.queue_bind(first, exchange, key)
    channel.basic_publish(exchange, key, b"routable")
    assert channel.basic_get(first, auto_ack=True)[2] == b"routable"
    assert channel.basic_get(first, auto_ack=True)[0] is None
    expected = (BOUND_QUEUES - 1) * (1 + (BOUND_QUEUES - 1) + 1) - taken
    wait_for(
        lambda: len(consumed) == expected,
        connection,
        what=lambda: f"{expected} deliveries to the consumers, {len(consumed)} came",
    )
    # Unbinding and deleting all but one binding leaves it; the last one's going takes it.
    channel.queue_unbind(first, exchange, key)
    for queue in others[:-1]:
        channel.queue_delete(queue)
    assert exchange_exists(connection, exchange)
    channel.queue_delete(others[-1])
    assert not exchange_exists(connection, exchange)
    connection.close()
