"""Consuming as RabbitMQ has it, on both backends: consumers sharing a queue, exclusive
consumers, consumer tags, no_ack, Basic.Get, ack/nack/reject (multiple, requeue), recover,
prefetch per consumer and per channel, the redelivered flag, and unacknowledged messages
given back when a channel, a connection or a consumer goes away."""

from __future__ import annotations

from dataclasses import dataclass, field

import amqp
import httpx
import pika
import pika.exceptions
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.model.naming import topic_for
from tests.integration.clients.conftest import PULSAR_ONLY, Running
from tests.support.clients import (
    channel_closed,
    collect,
    connection_closed,
    observe,
    round_trip,
    unique,
    wait_for,
    wait_for_count,
)


@dataclass
class Delivery:
    consumer: str
    tag: int
    body: bytes
    redelivered: bool


@dataclass
class Recorder:
    """Records the deliveries of any number of pika consumers."""

    deliveries: list[Delivery] = field(default_factory=list)

    def __call__(
        self, _ch: BlockingChannel, method: pika.spec.Basic.Deliver, _p: object, body: bytes
    ) -> None:
        self.deliveries.append(
            Delivery(method.consumer_tag, method.delivery_tag, body, method.redelivered)
        )

    def of(self, consumer: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.consumer == consumer]

    def bodies(self) -> list[bytes]:
        return [d.body for d in self.deliveries]


def filled_queue(channel: BlockingChannel, count: int, prefix: str = "m") -> str:
    queue = unique("q")
    channel.queue_declare(queue)
    publisher = channel.connection.channel()
    publisher.confirm_delivery()
    for n in range(count):
        publisher.basic_publish("", queue, f"{prefix}{n}".encode())
    publisher.close()
    return queue


def bodies(count: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{n}".encode() for n in range(count)]


# ------------------------------------------------------------------------------ consumers


def test_consumers_share_the_work(running: Running) -> None:
    """Several consumers on one queue: every message is delivered to exactly one of them,
    each gets a share, and with acks nothing is lost or duplicated."""
    connection = running.connect()
    queue = unique("work")
    setup = connection.channel()
    setup.queue_declare(queue)
    recorder = Recorder()
    channels = [connection.channel() for _ in range(3)]
    for channel in channels:
        channel.basic_qos(prefetch_count=5)

        def ack_and_record(ch: BlockingChannel, method: object, props: object, body: bytes) -> None:
            recorder(ch, method, props, body)  # type: ignore[arg-type]
            ch.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

        channel.basic_consume(queue, ack_and_record)
    total = 300
    setup.confirm_delivery()
    for n in range(total):
        setup.basic_publish("", queue, f"m{n}".encode())
    wait_for(lambda: len(recorder.deliveries) >= total, connection, what=f"{total} deliveries")
    observe(connection)
    assert sorted(recorder.bodies()) == sorted(bodies(total))
    shares = {tag: len(recorder.of(tag)) for channel in channels for tag in channel.consumer_tags}
    assert all(share > 0 for share in shares.values()), shares
    assert not any(d.redelivered for d in recorder.deliveries)
    connection.close()


def test_exclusive_consumer_keeps_others_out(running: Running) -> None:
    connection = running.connect()
    queue = unique("q")
    owner = connection.channel()
    owner.queue_declare(queue)
    tag = owner.basic_consume(queue, lambda *a: None, exclusive=True)
    in_use = f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use"
    with channel_closed(403, in_use):
        connection.channel().basic_consume(queue, lambda *a: None)
    other = running.connect()  # another connection as well
    with channel_closed(403, in_use):
        other.channel().basic_consume(queue, lambda *a: None)
    owner.basic_cancel(tag)
    # Free again; and an exclusive consume is refused while anyone else consumes.
    shared = connection.channel()
    shared.basic_consume(queue, lambda *a: None)
    with channel_closed(403, in_use):
        other.channel().basic_consume(queue, lambda *a: None, exclusive=True)
    other.close()
    connection.close()


def _amqp_connection(running: Running) -> amqp.Connection:
    """py-amqp, kombu's transport: it sends an empty consumer tag when given none, and does
    not police tag reuse itself."""
    connection = amqp.Connection(f"127.0.0.1:{running.port}", connect_timeout=10)
    connection.connect()
    return connection


def test_server_generates_consumer_tags(running: Running) -> None:
    connection = _amqp_connection(running)
    channel = connection.channel()
    queue = unique("q")
    channel.queue_declare(queue)
    tags = [channel.basic_consume(queue, callback=lambda m: None) for _ in range(3)]
    assert all(tag.startswith("amq.ctag-") for tag in tags), tags
    assert len(set(tags)) == 3
    assert channel.basic_consume(queue, consumer_tag="mine", callback=lambda m: None) == "mine"
    channel.basic_cancel("mine")
    # A tag is per channel: another channel may use it.
    assert connection.channel().basic_consume(queue, consumer_tag=tags[0]) == tags[0]
    connection.close()


@pytest.mark.parametrize("running", ["memory"], indirect=True)
def test_close_ok_always_comes_while_consumers_run(running: Running) -> None:
    """Connection.Close with consumers on two channels, many times: every close must be
    answered with Close-Ok. (A consumer task flushing as the session closed could take the
    Close-Ok from the core and lose it to its own cancellation: py-amqp then raised "Server
    unexpectedly closed connection" on ~2% of closes, so this loop failed ~19 times in 20.)"""
    for round_ in range(150):
        connection = _amqp_connection(running)
        first, second = connection.channel(), connection.channel()
        queue = unique("q")
        first.queue_declare(queue)
        for channel in (first, first, second):
            channel.basic_consume(queue, callback=lambda m: None)
        try:
            connection.close()
        except OSError as error:
            pytest.fail(f"close {round_}: {error}")


def test_reusing_a_consumer_tag_is_530(running: Running) -> None:
    connection = _amqp_connection(running)
    channel = connection.channel()
    queue = unique("q")
    channel.queue_declare(queue)
    channel.basic_consume(queue, consumer_tag="twice", callback=lambda m: None)
    with pytest.raises(amqp.exceptions.NotAllowed) as refused:
        channel.basic_consume(queue, consumer_tag="twice", callback=lambda m: None)
    assert refused.value.reply_code == 530
    assert refused.value.reply_text == "NOT_ALLOWED - attempt to reuse consumer tag 'twice'"
    connection.collect()


def test_cancel_of_an_unknown_tag_is_fine(channel: BlockingChannel) -> None:
    queue = unique("q")
    channel.queue_declare(queue)
    tag = channel.basic_consume(queue, lambda *a: None)
    channel.basic_cancel(tag)
    channel.basic_cancel(tag)  # pika forgets it; the server answers Cancel-Ok anyway
    round_trip(channel)


def test_no_ack_consumer(running: Running) -> None:
    """Deliveries are settled as they are sent: no acks, no prefetch limit, nothing left."""
    connection = running.connect()
    channel = connection.channel()
    queue = filled_queue(channel, 10)
    channel.basic_qos(prefetch_count=1)  # ignored for no_ack consumers, as in RabbitMQ
    recorder = Recorder()
    tag = channel.basic_consume(queue, recorder, auto_ack=True)
    wait_for(lambda: len(recorder.deliveries) == 10, connection, what="10 no-ack deliveries")
    assert recorder.bodies() == bodies(10)
    channel.basic_cancel(tag)
    channel.close()
    # Nothing comes back when the channel closes: no_ack deliveries are done with.
    assert collect(connection, {queue: 0}) == {queue: []}
    connection.close()


# ------------------------------------------------------------------------------- Basic.Get


def test_basic_get(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = filled_queue(channel, 3)
    method, _, body = channel.basic_get(queue)
    assert body == b"m0" and method.redelivered is False
    assert method.exchange == "" and method.routing_key == queue
    channel.basic_ack(method.delivery_tag)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert body == b"m1"
    method, _, body = channel.basic_get(queue)
    assert body == b"m2"
    channel.basic_reject(method.delivery_tag, requeue=True)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (body, method.redelivered) == (b"m2", True)
    assert channel.basic_get(queue) == (None, None, None)
    with channel_closed(404, "NOT_FOUND - no queue 'nope' in vhost '/'"):
        channel.basic_get("nope")
    connection.close()


def test_basic_get_reports_the_messages_left(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = filled_queue(channel, 5)
    assert wait_for_count(channel, queue, 5) == 5
    counts = [channel.basic_get(queue, auto_ack=True)[0].message_count for _ in range(5)]
    assert counts == [4, 3, 2, 1, 0]
    connection.close()


def test_basic_get_counts_what_others_hold_and_what_arrives(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = filled_queue(channel, 4)
    assert wait_for_count(channel, queue, 4) == 4
    # Unacknowledged Gets are not ready: 3 left, then 2 (the first is still held).
    first = channel.basic_get(queue)[0]
    second = channel.basic_get(queue)[0]
    assert (first.message_count, second.message_count) == (3, 2)
    channel.basic_reject(first.delivery_tag, requeue=True)
    channel.basic_ack(second.delivery_tag)
    # Emptied, then three more published: the first Get after them counts them again.
    while channel.basic_get(queue, auto_ack=True)[0] is not None:
        pass
    for n in range(3):
        channel.basic_publish("", queue, f"late{n}".encode())
    assert wait_for_count(channel, queue, 3) == 3
    counts = [channel.basic_get(queue, auto_ack=True)[0].message_count for _ in range(3)]
    assert counts == [2, 1, 0]
    connection.close()


def test_consumer_after_basic_get_receives_everything(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = unique("q")
    channel.queue_declare(queue)
    assert channel.basic_get(queue) == (None, None, None)
    recorder = Recorder()
    channel.basic_consume(queue, recorder, auto_ack=True)
    for n in range(5):
        channel.basic_publish("", queue, f"m{n}".encode())
    wait_for(lambda: len(recorder.deliveries) == 5, connection, timeout=3, what="5 deliveries")
    assert recorder.bodies() == bodies(5)
    connection.close()


# ---------------------------------------------------------------------- ack, nack, reject


def consume_unacked(
    connection: pika.BlockingConnection, queue: str, count: int, prefetch: int = 0
) -> tuple[BlockingChannel, Recorder, str]:
    channel = connection.channel()
    if prefetch:
        channel.basic_qos(prefetch_count=prefetch)
    recorder = Recorder()
    tag = channel.basic_consume(queue, recorder)
    wait_for(lambda: len(recorder.deliveries) >= count, connection, what=f"{count} deliveries")
    return channel, recorder, tag


def test_ack_multiple(running: Running) -> None:
    connection = running.connect()
    queue = filled_queue(connection.channel(), 5)
    channel, recorder, _ = consume_unacked(connection, queue, 5)
    assert recorder.bodies() == bodies(5)
    channel.basic_ack(recorder.deliveries[2].tag, multiple=True)  # m0..m2
    channel.close()  # m3, m4 go back
    again = collect(connection, {queue: 2})
    assert sorted(again[queue]) == [b"m3", b"m4"]
    connection.close()


def test_nack_multiple_with_and_without_requeue(running: Running) -> None:
    connection = running.connect()
    queue = filled_queue(connection.channel(), 6)
    channel, recorder, tag = consume_unacked(connection, queue, 6, prefetch=6)
    channel.basic_nack(recorder.deliveries[1].tag, multiple=True, requeue=False)  # m0, m1 dropped
    channel.basic_nack(recorder.deliveries[3].tag, multiple=True, requeue=True)  # m2, m3 back
    wait_for(lambda: len(recorder.deliveries) >= 8, connection, what="2 redeliveries")
    redelivered = recorder.deliveries[6:]
    assert sorted(d.body for d in redelivered) == [b"m2", b"m3"]
    assert all(d.redelivered for d in redelivered)
    channel.basic_ack(0, multiple=True)  # everything outstanding
    observe(connection)
    assert len(recorder.deliveries) == 8
    channel.basic_cancel(tag)
    channel.close()
    assert collect(connection, {queue: 0}) == {queue: []}
    connection.close()


def test_reject_without_requeue_drops(running: Running) -> None:
    connection = running.connect()
    queue = filled_queue(connection.channel(), 2)
    channel, recorder, _ = consume_unacked(connection, queue, 2)
    channel.basic_reject(recorder.deliveries[0].tag, requeue=False)
    channel.basic_reject(recorder.deliveries[1].tag, requeue=True)
    wait_for(lambda: len(recorder.deliveries) == 3, connection, what="the requeued message")
    assert (recorder.deliveries[2].body, recorder.deliveries[2].redelivered) == (b"m1", True)
    channel.basic_ack(recorder.deliveries[2].tag)
    channel.close()
    assert collect(connection, {queue: 0}) == {queue: []}
    connection.close()


@pytest.mark.parametrize(
    "settle",
    [
        lambda ch: ch.basic_ack(99),
        lambda ch: ch.basic_ack(99, multiple=True),
        lambda ch: ch.basic_nack(99, requeue=True),
        lambda ch: ch.basic_reject(99, requeue=False),
    ],
    ids=["ack", "ack-multiple", "nack", "reject"],
)
def test_unknown_delivery_tag_is_406(running: Running, settle: object) -> None:
    connection = running.connect()
    channel = connection.channel()
    with channel_closed(406, "PRECONDITION_FAILED - unknown delivery tag 99"):
        settle(channel)  # type: ignore[operator]
        round_trip(channel)
    connection.close()


def test_double_ack_is_406(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    queue = filled_queue(channel, 1)
    method, _, _ = channel.basic_get(queue)
    channel.basic_ack(method.delivery_tag)
    with channel_closed(406, f"PRECONDITION_FAILED - unknown delivery tag {method.delivery_tag}"):
        channel.basic_ack(method.delivery_tag)
        round_trip(channel)
    connection.close()


# ------------------------------------------------------------------------------------ recover


def test_recover_requeue_redelivers(running: Running) -> None:
    connection = running.connect()
    queue = filled_queue(connection.channel(), 3)
    channel, recorder, _ = consume_unacked(connection, queue, 3)
    assert not any(d.redelivered for d in recorder.deliveries)
    channel.basic_recover(requeue=True)
    wait_for(lambda: len(recorder.deliveries) >= 6, connection, what="3 redeliveries")
    again = recorder.deliveries[3:]
    assert sorted(d.body for d in again) == bodies(3)
    assert all(d.redelivered for d in again)
    # New delivery tags; the old ones are settled by the recover.
    assert {d.tag for d in again}.isdisjoint(d.tag for d in recorder.deliveries[:3])
    channel.basic_ack(0, multiple=True)
    connection.close()


def test_recover_without_requeue_is_540(running: Running) -> None:
    connection = running.connect()
    channel = connection.channel()
    with connection_closed(540, "NOT_IMPLEMENTED - requeue=false"):
        channel.basic_recover(requeue=False)


# ---------------------------------------------------------------------------------- prefetch


def test_prefetch_one_shares_a_queue_fairly_with_a_stuck_worker(running: Running) -> None:
    """RabbitMQ's work-queue pattern: with prefetch 1, a worker that holds its message does
    not hold others back; the busy worker gets everything else. (Pulsar consumers read ahead
    at most the prefetch per topic, so the stuck worker keeps at most a couple, not a
    receiver queue's worth.)"""
    total = 40
    stuck_connection, busy_connection = running.connect(), running.connect()
    queue = unique("fair")
    stuck_connection.channel().queue_declare(queue)
    stuck = stuck_connection.channel()
    stuck.basic_qos(prefetch_count=1)
    held = Recorder()
    stuck.basic_consume(queue, held)  # never acks
    busy = busy_connection.channel()
    busy.basic_qos(prefetch_count=1)
    done: list[bytes] = []

    def work(ch: BlockingChannel, method: pika.spec.Basic.Deliver, _p: object, body: bytes) -> None:
        done.append(body)
        ch.basic_ack(method.delivery_tag)

    busy.basic_consume(queue, work)
    publisher = busy_connection.channel()
    publisher.confirm_delivery()
    for n in range(total):
        publisher.basic_publish("", queue, f"m{n}".encode())
    wait_for(lambda: len(held.deliveries) == 1, stuck_connection, what="the stuck worker's one")
    # At most the stuck worker's one delivery and a message read ahead for it stay behind.
    wait_for(
        lambda: len(done) >= total - 3,
        busy_connection,
        what=lambda: f"{len(done)} of {total} done by the busy worker",
    )
    observe(stuck_connection)
    assert len(held.deliveries) == 1
    stuck_connection.close()  # its message goes back, and to the busy worker
    wait_for(lambda: len(done) == total, busy_connection, what=f"all {total} done")
    assert sorted(done) == sorted(bodies(total))
    busy_connection.channel().queue_delete(queue)
    busy_connection.close()


def test_prefetch_is_per_consumer(running: Running) -> None:
    connection = running.connect()
    setup = connection.channel()
    first, second = filled_queue(setup, 6, "a"), filled_queue(setup, 6, "b")
    channel = connection.channel()
    channel.basic_qos(prefetch_count=2)  # global=false: each consumer may hold 2
    recorder = Recorder()
    tag_a = channel.basic_consume(first, recorder)
    tag_b = channel.basic_consume(second, recorder)
    wait_for(lambda: len(recorder.deliveries) >= 4, connection, what="2 deliveries each")
    observe(connection)
    assert [d.body for d in recorder.of(tag_a)] == [b"a0", b"a1"]
    assert [d.body for d in recorder.of(tag_b)] == [b"b0", b"b1"]
    channel.basic_ack(recorder.of(tag_a)[0].tag)
    wait_for(lambda: len(recorder.of(tag_a)) == 3, connection, what="one more for the first")
    observe(connection)
    assert len(recorder.of(tag_b)) == 2
    connection.close()


def test_global_prefetch_limits_the_channel(running: Running) -> None:
    """One consumer under a channel-wide limit (several consumers sharing it: below)."""
    connection = running.connect()
    queue = filled_queue(connection.channel(), 6)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=3, global_qos=True)
    recorder = Recorder()
    channel.basic_consume(queue, recorder)
    wait_for(lambda: len(recorder.deliveries) >= 3, connection, what="3 deliveries")
    observe(connection)
    assert recorder.bodies() == bodies(3)
    channel.basic_ack(recorder.deliveries[0].tag)
    wait_for(lambda: len(recorder.deliveries) >= 4, connection, what="a 4th delivery")
    observe(connection)
    assert recorder.bodies() == bodies(4)
    connection.close()


@pytest.mark.parametrize(("per_consumer", "per_channel", "limit"), [(2, 3, 2), (5, 3, 3)])
def test_the_stricter_prefetch_wins(
    running: Running, per_consumer: int, per_channel: int, limit: int
) -> None:
    connection = running.connect()
    queue = filled_queue(connection.channel(), 6)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=per_consumer)
    channel.basic_qos(prefetch_count=per_channel, global_qos=True)
    recorder = Recorder()
    channel.basic_consume(queue, recorder)
    wait_for(lambda: len(recorder.deliveries) >= limit, connection, what=f"{limit} deliveries")
    observe(connection)
    assert recorder.bodies() == bodies(limit)
    connection.close()


def test_global_prefetch_holds_for_consumers_waiting_together(running: Running) -> None:
    """Both consumers are idle (waiting for messages) when one message arrives for each:
    with a channel-wide prefetch of 1, only one may be delivered until it is acked."""
    connection = running.connect()
    setup = connection.channel()
    first, second = unique("q"), unique("q")
    setup.queue_declare(first)
    setup.queue_declare(second)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1, global_qos=True)
    recorder = Recorder()
    channel.basic_consume(first, recorder)
    channel.basic_consume(second, recorder)
    observe(connection)
    setup.basic_publish("", first, b"a")
    setup.basic_publish("", second, b"b")
    wait_for(lambda: len(recorder.deliveries) >= 1, connection, what="a delivery")
    observe(connection, 0.5)
    assert len(recorder.deliveries) == 1
    channel.basic_ack(recorder.deliveries[0].tag)
    wait_for(lambda: len(recorder.deliveries) >= 2, connection, what="the second delivery")
    assert sorted(recorder.bodies()) == [b"a", b"b"]
    connection.close()


# ------------------------------------------------------------- unacked messages come back


HOW = ["channel close", "connection close", "consumer cancel"]


def requeue_unacked(running: Running, how: str) -> list[Delivery]:
    """Four messages delivered, the first acked, the other three left unacknowledged when
    ``how`` happens; returns what a new consumer then receives. A cancelled consumer's
    messages stay with the channel (RabbitMQ): the client acks m1 after the cancel, and m2
    and m3 come back when the channel closes."""
    holder = running.connect()
    queue = filled_queue(holder.channel(), 4)
    channel, recorder, tag = consume_unacked(holder, queue, 4)
    channel.basic_ack(recorder.deliveries[0].tag)  # m0 is done with
    taker = running.connect()
    taken = Recorder()
    taker.channel().basic_consume(queue, taken, auto_ack=True)
    if how == "channel close":
        channel.close()
    elif how == "connection close":
        holder.close()
    else:
        channel.basic_cancel(tag)
        observe(taker)
        assert taken.deliveries == []  # still held by the channel
        channel.basic_ack(recorder.deliveries[1].tag)  # settles m1, after the cancel
        round_trip(channel)
        channel.close()
    expected = 2 if how == "consumer cancel" else 3
    wait_for(lambda: len(taken.deliveries) >= expected, taker, what="the requeued messages")
    observe(taker)
    if holder.is_open:
        holder.close()
    taker.close()
    return taken.deliveries


@pytest.mark.parametrize("how", HOW)
def test_unacked_messages_are_requeued(running: Running, how: str) -> None:
    """Closing the channel or the connection gives unacknowledged messages back to the queue
    (RabbitMQ). Cancelling the consumer leaves them with the channel, as RabbitMQ does:
    acks of their tags settle them, and they go back when the channel closes."""
    taken = requeue_unacked(running, how)
    expected = [b"m2", b"m3"] if how == "consumer cancel" else [b"m1", b"m2", b"m3"]
    assert sorted(d.body for d in taken) == expected


@pytest.mark.parametrize("how", HOW)
def test_requeued_messages_are_marked_redelivered(running: Running, how: str) -> None:
    taken = requeue_unacked(running, how)
    assert taken and all(d.redelivered for d in taken), taken


@pytest.mark.parametrize("running", [PULSAR_ONLY], indirect=True)
def test_messages_pulsar_sends_again_after_a_reconnection_are_marked_redelivered(
    running: Running,
) -> None:
    """The topic is unloaded under a consumer holding unacknowledged messages: pulsar-client
    reconnects and the broker sends them again, uncounted. The client, which still holds the
    first copies, must see the second ones flagged, as RabbitMQ flags anything delivered
    before."""
    connection = running.connect()
    queue = filled_queue(connection.channel(), 3)
    _channel, recorder, _tag = consume_unacked(connection, queue, 3)
    assert [d.redelivered for d in recorder.deliveries] == [False] * 3
    assert running.namespace is not None
    local = topic_for(running.namespace, "", queue).rsplit("/", 1)[-1]
    with httpx.Client(base_url=running.web_url, timeout=30) as admin:
        unloaded = admin.put(
            f"/admin/v2/persistent/{running.namespace.tenant}/"
            f"{running.namespace.namespace}/{local}/unload"
        )
    assert unloaded.status_code == 204, unloaded.text
    wait_for(lambda: len(recorder.deliveries) >= 6, connection, timeout=30, what="3 more")
    again = recorder.deliveries[3:]
    assert sorted(d.body for d in again) == bodies(3)
    assert all(d.redelivered for d in again), again
    connection.close()
