"""Queues as RabbitMQ has them, through pika, on both backends: declare (passive, durable,
exclusive, auto-delete, server-named), Declare-Ok's counts, purge, delete and its conditions,
the implicit default-exchange binding."""

from __future__ import annotations

from typing import Any

import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    channel_closed,
    collect,
    get_bodies,
    observe,
    unique,
    wait_for,
    wait_for_count,
)

N = 25


def publish_confirmed(channel: BlockingChannel, queue: str, count: int, prefix: str = "m") -> None:
    """``count`` messages to ``queue`` through the default exchange, each confirmed."""
    channel.confirm_delivery()
    for n in range(count):
        channel.basic_publish("", queue, f"{prefix}{n}".encode())


# ------------------------------------------------------------------------------------ declare


def test_declare_ok_names_the_queue_with_zero_counts(channel: BlockingChannel) -> None:
    name = unique("q")
    ok = channel.queue_declare(name).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 0)
    ok = channel.queue_declare(name, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (name, 0, 0)


def test_server_named_queues(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    names = {channel.queue_declare("").method.queue for _ in range(3)}
    assert len(names) == 3
    assert all(name.startswith("amq.gen-") for name in names)
    exclusive = channel.queue_declare("", exclusive=True).method.queue
    assert exclusive.startswith("amq.gen-")
    # Usable like any queue: addressed by name, passively declarable, default-exchange bound.
    channel.queue_declare(exclusive, passive=True)
    channel.basic_publish("", exclusive, b"to a server-named queue")
    assert get_bodies(channel, exclusive, 1) == [b"to a server-named queue"]
    # A client may not name one itself (the prefix is reserved even when the queue exists).
    with channel_closed(
        403, f"ACCESS_REFUSED - queue name '{exclusive}' contains reserved prefix 'amq.*'"
    ):
        channel.queue_declare(exclusive, exclusive=True)
    channel = connection.channel()
    for name in names:
        channel.queue_delete(name)
    connection.close()


def test_reserved_prefix_is_403(channel: BlockingChannel) -> None:
    name = unique("amq.mine")
    with channel_closed(
        403, f"ACCESS_REFUSED - queue name '{name}' contains reserved prefix 'amq.*'"
    ):
        channel.queue_declare(name)


def test_passive_declare_of_a_missing_queue_is_404(channel: BlockingChannel) -> None:
    name = unique("missing")
    with channel_closed(404, f"NOT_FOUND - no queue '{name}' in vhost '/'"):
        channel.queue_declare(name, passive=True)


def _inequivalent(name: str, arg: str, received: str, current: str) -> str:
    return (
        f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{name}' in vhost '/': "
        f"received {received} but current is {current}"
    )


@pytest.mark.parametrize(
    ("original", "changed", "arg", "received", "current"),
    [
        ({"durable": True}, {"durable": False}, "durable", "'false'", "'true'"),
        ({}, {"auto_delete": True}, "auto_delete", "'true'", "'false'"),
        (
            {"arguments": {"x-queue-mode": "default"}},
            {"arguments": {"x-queue-mode": "lazy"}},
            "x-queue-mode",
            "'lazy'",
            "'default'",
        ),
        (
            {},
            {"arguments": {"x-queue-version": 2}},
            "x-queue-version",
            "the value '2' of type 'signedint'",  # pika sends small ints as 'I'
            "none",
        ),
    ],
)
def test_inequivalent_redeclare_is_406(
    channel: BlockingChannel,
    original: dict[str, Any],
    changed: dict[str, Any],
    arg: str,
    received: str,
    current: str,
) -> None:
    name = unique("q")
    channel.queue_declare(name, **original)
    channel.queue_declare(name, **original)  # the same declaration again is a no-op
    with channel_closed(406, _inequivalent(name, arg, received, current)):
        channel.queue_declare(name, **{**original, **changed})


def test_arguments_outside_the_queue_type_may_differ(channel: BlockingChannel) -> None:
    name = unique("q")
    channel.queue_declare(name, durable=True, arguments={"x-custom": "a"})
    channel.queue_declare(
        name, durable=True, arguments={"x-custom": "b", "x-queue-type": "classic"}
    )
    channel.queue_declare(name, durable=True)


def test_exclusive_queue_belongs_to_its_connection(running: Running) -> None:
    owner = running.connect()
    name = unique("mine")
    owner.channel().queue_declare(name, exclusive=True)
    locked = (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{name}' in vhost "
        "'/'. It could be originally declared on another connection or the exclusive property "
        "value does not match that of the original declaration."
    )
    other = running.connect()
    for action in (
        lambda ch: ch.queue_declare(name, passive=True),
        lambda ch: ch.queue_declare(name, exclusive=True),
        lambda ch: ch.basic_consume(name, lambda *a: None),
        lambda ch: ch.basic_get(name),
        lambda ch: ch.queue_purge(name),
        lambda ch: ch.queue_delete(name),
    ):
        with channel_closed(405, locked):
            action(other.channel())
    # The owner's own non-exclusive redeclare does not match either.
    with channel_closed(405, locked):
        owner.channel().queue_declare(name)
    owner.close()
    # Gone with its connection.
    with channel_closed(404, f"NOT_FOUND - no queue '{name}' in vhost '/'"):
        other.channel().queue_declare(name, passive=True)
    other.close()


def test_auto_delete_queue_goes_with_its_last_consumer(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("auto")
    channel.queue_declare(name, auto_delete=True)
    # Never consumed: it stays.
    channel.queue_declare(name, passive=True)
    first = channel.basic_consume(name, lambda *a: None)
    second = connection.channel()
    second.basic_consume(name, lambda *a: None, consumer_tag="second")
    channel.basic_cancel(first)
    channel.queue_declare(name, passive=True)  # one consumer left
    second.basic_cancel("second")
    # Deleted when the last consumer went (on Pulsar, in the background: wait for it).
    probe = running.connect()

    def gone() -> bool:
        try:
            probe.channel().queue_declare(name, passive=True)
        except pika.exceptions.ChannelClosedByBroker as closed:
            assert closed.reply_code == 404
            return True
        return False

    wait_for(gone, probe, what=f"auto-delete queue {name} to go")
    probe.close()
    connection.close()


# ----------------------------------------------------------------------------- Declare-Ok counts


def test_declare_ok_counts_messages_and_consumers(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("counted")
    channel.queue_declare(name)
    publish_confirmed(channel, name, N)
    assert wait_for_count(channel, name, N) == N
    # A non-passive redeclare reports the same.
    assert channel.queue_declare(name).method.message_count == N
    consumers = connection.channel()
    consumers.basic_qos(prefetch_count=1)
    consumers.basic_consume(name, lambda *a: None)
    consumers.basic_consume(name, lambda *a: None)
    ok = channel.queue_declare(name, passive=True).method
    assert ok.consumer_count == 2
    connection.close()


def test_passive_declare_from_another_connection_right_after_a_first_publish(
    running: Running,
) -> None:
    # Issue 34: the publisher registers the queue's key before Pulsar has its topic; a
    # passive declare counting in between answered 404 "Topic ... not found" (2 of 10).
    publishing, declaring = running.connect(), running.connect()
    publisher, declarer = publishing.channel(), declaring.channel()
    for _ in range(10):
        name = unique("first-use")
        publisher.queue_declare(name)
        publisher.basic_publish("", name, b"m")
        ok = declarer.queue_declare(name, passive=True).method
        assert ok.message_count in (0, 1)
    publishing.close()
    declaring.close()


def test_declare_ok_counts_a_burst_of_messages(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("burst")
    channel.queue_declare(name)
    for n in range(50):  # no confirms: the publishes go out back to back
        channel.basic_publish("", name, f"m{n}".encode())
    assert wait_for_count(channel, name, 50, timeout=3) == 50
    connection.close()


def test_declare_ok_counts_a_backlog_longer_than_pulsars_scan(running: Running) -> None:
    # The broker's backlog scan stops at subscriptionBacklogScanMaxEntries (10,000 entries by
    # default); RabbitMQ counts every message.
    connection = running.connect()
    channel = connection.channel()
    name = unique("long")
    channel.queue_declare(name)
    for n in range(12_000):
        channel.basic_publish("", name, f"m{n}".encode())
    assert wait_for_count(channel, name, 12_000, timeout=30) == 12_000
    channel.queue_delete(name)
    connection.close()


def test_message_count_excludes_unacknowledged(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("counted")
    channel.queue_declare(name)
    publish_confirmed(channel, name, 3)
    assert wait_for_count(channel, name, 3) == 3
    method, _, body = channel.basic_get(name)
    assert body == b"m0"
    assert wait_for_count(channel, name, 2, timeout=3) == 2
    channel.basic_reject(method.delivery_tag, requeue=True)
    assert wait_for_count(channel, name, 3) == 3
    connection.close()


# -------------------------------------------------------------------------------------- purge


def test_purge_removes_the_backlog(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("purged")
    channel.queue_declare(name)
    publish_confirmed(channel, name, N)
    assert wait_for_count(channel, name, N) == N
    assert channel.queue_purge(name).method.message_count == N
    assert channel.queue_declare(name, passive=True).method.message_count == 0
    # Nothing for a consumer started after the purge...
    got: list[bytes] = []
    tag = channel.basic_consume(name, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    observe(connection, 0.5)
    assert got == []
    # ...which gets what is published afterwards.
    channel.basic_publish("", name, b"after purge")
    wait_for(lambda: got == [b"after purge"], connection, what="the message after the purge")
    channel.basic_cancel(tag)
    # Nothing for a Basic.Get either.
    assert channel.basic_get(name, auto_ack=True) == (None, None, None)
    connection.close()


def test_purge_after_basic_get_leaves_nothing(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("purged")
    channel.queue_declare(name)
    publish_confirmed(channel, name, N)
    _, _, body = channel.basic_get(name, auto_ack=True)
    assert body == b"m0"
    assert wait_for_count(channel, name, N - 1) == N - 1
    assert channel.queue_purge(name).method.message_count == N - 1
    assert channel.basic_get(name, auto_ack=True) == (None, None, None)
    got: list[bytes] = []
    channel.basic_consume(name, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
    observe(connection, 0.5)
    assert got == []
    connection.close()


def test_purge_while_consuming_leaves_only_the_unacked(running: Running) -> None:
    """RabbitMQ purges the ready messages; a delivered, unacknowledged one stays with its
    consumer, and nothing else is delivered after it is acknowledged."""
    connection = running.connect()
    channel = connection.channel()
    name = unique("purged")
    channel.queue_declare(name)
    publish_confirmed(channel, name, N)
    channel.basic_qos(prefetch_count=1)
    got: list[tuple[int, bytes]] = []
    channel.basic_consume(name, lambda _c, m, _p, body: got.append((m.delivery_tag, body)))
    wait_for(lambda: len(got) == 1, connection, what="the first delivery")
    assert got[0][1] == b"m0"
    # (PurgeOk's count is checked elsewhere: message_count semantics.)
    connection.channel().queue_purge(name)
    channel.basic_ack(got[0][0])
    observe(connection, 0.5)
    assert [body for _, body in got] == [b"m0"]
    connection.close()


def test_purge_of_a_missing_queue_is_404(channel: BlockingChannel) -> None:
    name = unique("missing")
    with channel_closed(404, f"NOT_FOUND - no queue '{name}' in vhost '/'"):
        channel.queue_purge(name)


# ------------------------------------------------------------------------------------- delete


def test_delete_reports_the_count_and_is_idempotent(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("deleted")
    channel.queue_declare(name)
    publish_confirmed(channel, name, 3)
    assert wait_for_count(channel, name, 3) == 3
    assert channel.queue_delete(name).method.message_count == 3
    assert channel.queue_delete(name).method.message_count == 0  # RabbitMQ: idempotent
    with channel_closed(404, f"NOT_FOUND - no queue '{name}' in vhost '/'"):
        channel.queue_declare(name, passive=True)
    # Re-created under the same name, it starts empty: the old messages went with the queue.
    channel = connection.channel()
    channel.queue_declare(name)
    channel.basic_publish("", name, b"new")
    assert get_bodies(channel, name, 1) == [b"new"]
    assert channel.basic_get(name, auto_ack=True) == (None, None, None)
    connection.close()


def test_deleted_queue_no_longer_routes(channel: BlockingChannel) -> None:
    name = unique("deleted")
    channel.queue_declare(name)
    channel.queue_delete(name)
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish("", name, b"nobody", mandatory=True)


def test_delete_if_unused_refuses_a_consumed_queue(running: Running) -> None:
    connection = running.connect()
    name = unique("used")
    consumer = connection.channel()
    consumer.queue_declare(name)
    tag = consumer.basic_consume(name, lambda *a: None)
    with channel_closed(406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' in use"):
        connection.channel().queue_delete(name, if_unused=True)
    consumer.basic_cancel(tag)
    connection.channel().queue_delete(name, if_unused=True)
    connection.close()


def test_delete_if_empty_refuses_a_queue_with_messages(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    name = unique("full")
    channel.queue_declare(name)
    publish_confirmed(channel, name, 2)
    assert wait_for_count(channel, name, 2) == 2
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        channel.queue_delete(name, if_empty=True)
    assert closed.value.reply_code == 406
    channel = connection.channel()
    assert len(get_bodies(channel, name, 2)) == 2
    assert wait_for_count(channel, name, 0) == 0
    channel.queue_delete(name, if_empty=True)
    connection.close()


def test_delete_if_empty_text_is_rabbitmqs(channel: BlockingChannel) -> None:
    name = unique("full")
    channel.queue_declare(name)
    publish_confirmed(channel, name, 1)
    assert wait_for_count(channel, name, 1) == 1
    with channel_closed(406, f"PRECONDITION_FAILED - queue '{name}' in vhost '/' not empty"):
        channel.queue_delete(name, if_empty=True)


def test_deleting_a_queue_cancels_its_consumers(running: Running) -> None:
    """Consumers that advertise consumer_cancel_notify (pika does) get Basic.Cancel; their
    unacknowledged messages are gone with the queue."""
    consumer_connection = running.connect()
    name = unique("doomed")
    channels = [consumer_connection.channel() for _ in range(2)]
    channels[0].queue_declare(name)
    cancelled: list[str] = []
    delivered: list[bytes] = []
    for channel in channels:
        channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        channel.basic_consume(name, lambda _c, _m, _p, body: delivered.append(body))
    tags = {tag for channel in channels for tag in channel.consumer_tags}
    channels[0].basic_publish("", name, b"held unacked")
    wait_for(lambda: delivered == [b"held unacked"], consumer_connection, what="a delivery")
    admin = running.connect()
    admin.channel().queue_delete(name)
    wait_for(lambda: set(cancelled) == tags, consumer_connection, what="Basic.Cancel")
    # The channels stay open and usable.
    for channel in channels:
        assert channel.is_open and not channel.consumer_tags
    channels[0].queue_declare(name)
    assert channels[0].basic_get(name, auto_ack=True) == (None, None, None)
    channels[0].queue_delete(name)
    admin.close()
    consumer_connection.close()


# ---------------------------------------------------------------------- the default exchange


def test_every_queue_is_bound_to_the_default_exchange(connection: pika.BlockingConnection) -> None:
    channel = connection.channel()
    plain, bound, exclusive = unique("plain"), unique("bound"), unique("excl")
    channel.queue_declare(plain)
    channel.queue_declare(bound, durable=True)
    channel.queue_declare(exclusive, exclusive=True)
    exchange = unique("x")
    channel.exchange_declare(exchange, "fanout")
    channel.queue_bind(bound, exchange)
    for name in (plain, bound, exclusive):
        channel.basic_publish("", name, name.encode())
    channel.basic_publish(exchange, "", b"fanned out")
    got = collect(connection, {plain: 1, bound: 2, exclusive: 1})
    assert got[plain] == [plain.encode()]
    assert sorted(got[bound]) == sorted([bound.encode(), b"fanned out"])
    assert got[exclusive] == [exclusive.encode()]
    for name in (plain, bound):
        channel.queue_delete(name)


def _get(channel: BlockingChannel, queue: str, *, auto_ack: bool = False) -> Any:
    got: list[Any] = []
    wait_for(lambda: got.append(channel.basic_get(queue, auto_ack=auto_ack)[0]) or got[-1])
    return got[-1]


def _consume_one(
    connection: pika.BlockingConnection, channel: BlockingChannel, queue: str, *, auto_ack: bool
) -> Any:
    got: list[Any] = []
    tag = channel.basic_consume(queue, lambda ch, m, p, b: got.append(m), auto_ack=auto_ack)
    wait_for(lambda: bool(got), connection, what="a delivery")
    channel.basic_cancel(tag)
    return got[0]


def _settle_by(how: str, connection: pika.BlockingConnection, queue: str) -> None:
    channel = connection.channel()
    if how == "get-ack":
        channel.basic_ack(_get(channel, queue).delivery_tag)
    elif how == "get-auto-ack":
        _get(channel, queue, auto_ack=True)
    elif how == "consume-ack":
        channel.basic_ack(_consume_one(connection, channel, queue, auto_ack=False).delivery_tag)
    elif how == "consume-auto-ack":
        _consume_one(connection, channel, queue, auto_ack=True)
    elif how == "reject":  # dead-lettered to nowhere: dropped, as RabbitMQ does
        channel.basic_reject(_get(channel, queue).delivery_tag, requeue=False)
    channel.close()


@pytest.mark.parametrize(
    "how", ["get-ack", "get-auto-ack", "consume-ack", "consume-auto-ack", "reject"]
)
def test_counts_right_after_a_settle_reflect_it(running: Running, how: str) -> None:
    # Issue 37: Declare-Ok still counted a message its own client had just settled, and
    # delete if-empty answered 406 "not empty", for half a second. A client's own
    # settlements are in every count it asks for afterwards (read-your-writes).
    connection = running.connect()
    channel = connection.channel()
    name = unique(f"settled-{how}")
    channel.queue_declare(name)
    publish_confirmed(channel, name, 1)
    _settle_by(how, connection, name)
    assert channel.queue_declare(name, passive=True).method.message_count == 0
    channel.queue_delete(name, if_empty=True)
    connection.close()


@pytest.mark.parametrize("how", ["get", "consume"])
def test_a_purge_leaves_unacknowledged_deliveries_to_come_back(running: Running, how: str) -> None:
    # RabbitMQ's purge removes ready messages only; what a client holds unacknowledged comes
    # back when it is requeued (the Java client's QueueLifecycle/Purge test: basicGet after
    # the purge and the holder's close found nothing here).
    connection = running.connect()
    channel = connection.channel()
    name = unique(f"purged-{how}")
    channel.queue_declare(name)
    publish_confirmed(channel, name, 3)
    holder = connection.channel()
    if how == "get":
        held = [_get(holder, name), _get(holder, name)]
    else:
        holder.basic_qos(prefetch_count=2)
        held = []
        holder.basic_consume(name, lambda ch, m, p, b: held.append(m))
        wait_for(lambda: len(held) == 2, connection, what="two deliveries")
    assert channel.queue_purge(name).method.message_count == 1
    holder.close()  # its two unacknowledged messages go back to the queue
    assert sorted(get_bodies(channel, name, 2)) == [b"m0", b"m1"]
    connection.close()
