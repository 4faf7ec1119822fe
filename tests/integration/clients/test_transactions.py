"""AMQP transactions (tx.select/commit/rollback) as RabbitMQ's ``rabbit_channel`` has them, on
both backends, with pika and aio-pika: publishes and acks/nacks/rejects take effect at
Tx.Commit; Tx.Rollback drops the publishes and leaves the settled deliveries unacknowledged
(not requeued); tx and confirm modes exclude each other; Commit/Rollback need Tx.Select."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.server import transaction
from tests.integration.clients.conftest import Running
from tests.support.clients import (
    amqp_url,
    channel_closed,
    drain,
    get_bodies,
    unique,
    wait_for,
    wait_for_count,
)


def declared(channel: BlockingChannel) -> str:
    queue = unique("tx")
    channel.queue_declare(queue)
    return queue


def publish(channel: BlockingChannel, queue: str, *bodies: bytes) -> None:
    for body in bodies:
        channel.basic_publish("", queue, body)


def test_publishes_wait_for_the_commit(running: Running, channel: BlockingChannel) -> None:
    queue = declared(channel)
    tx = channel.connection.channel()
    tx.tx_select()
    publish(tx, queue, b"one", b"two", b"three")
    # Nothing of the transaction is published before Tx.Commit (a round trip on the same
    # connection has passed: the publishes reached the gateway before this Declare).
    assert channel.queue_declare(queue, passive=True).method.message_count == 0
    assert channel.basic_get(queue, auto_ack=True)[2] is None
    tx.tx_commit()
    # Commit-Ok comes once the messages are stored: all three are there, in order.
    assert get_bodies(channel, queue, 3) == [b"one", b"two", b"three"]
    # The channel stays transactional: the next transaction starts at once.
    publish(tx, queue, b"four")
    assert channel.basic_get(queue, auto_ack=True)[2] is None
    tx.tx_commit()
    assert get_bodies(channel, queue, 1) == [b"four"]


def test_rollback_discards_the_publishes(running: Running, channel: BlockingChannel) -> None:
    queue = declared(channel)
    tx = channel.connection.channel()
    tx.tx_select()
    publish(tx, queue, b"dropped-1", b"dropped-2")
    tx.tx_rollback()
    tx.tx_commit()  # an empty transaction commits nothing
    publish(tx, queue, b"kept")
    tx.tx_commit()
    assert get_bodies(channel, queue, 1) == [b"kept"]
    assert drain(channel, queue) == []


def test_an_uncommitted_transaction_dies_with_its_channel(
    running: Running, channel: BlockingChannel
) -> None:
    queue = declared(channel)
    tx = channel.connection.channel()
    tx.tx_select()
    publish(tx, queue, b"never")
    tx.close()
    assert channel.basic_get(queue, auto_ack=True)[2] is None


def got(channel: BlockingChannel, queue: str) -> tuple[int, bytes, bool]:
    """Basic.Get (manual ack) of one message: (delivery tag, body, redelivered)."""
    message: list[tuple[int, bytes, bool]] = []

    def one() -> bool:
        method, _, body = channel.basic_get(queue, auto_ack=False)
        if method is not None:
            message.append((method.delivery_tag, body, method.redelivered))
        return bool(message)

    wait_for(one, what=f"a message on {queue}")
    return message[0]


def test_acks_take_effect_at_the_commit(running: Running, channel: BlockingChannel) -> None:
    queue = declared(channel)
    publish(channel, queue, b"a")
    tx = channel.connection.channel()
    tx.tx_select()
    tag, body, _ = got(tx, queue)
    tx.basic_ack(tag)
    # A channel closing before the commit: the ack never happened, the message comes back.
    tx.close()
    assert got(channel, queue)[1:] == (body, True)


def test_rollback_leaves_the_deliveries_unacked_not_requeued(
    running: Running, channel: BlockingChannel
) -> None:
    queue = declared(channel)
    publish(channel, queue, b"a", b"b")
    tx = channel.connection.channel()
    tx.tx_select()
    first, _, _ = got(tx, queue)
    second, _, _ = got(tx, queue)
    tx.basic_ack(second, multiple=True)
    tx.tx_rollback()
    # Not requeued: nothing is ready in the queue meanwhile.
    assert channel.basic_get(queue, auto_ack=True)[2] is None
    # Still unacknowledged on the channel: acking them again is no unknown-tag error.
    tx.basic_ack(first)
    tx.basic_reject(second, requeue=False)
    tx.tx_commit()
    tx.close()
    # Settled for good: closing the channel gave nothing back.
    assert wait_for_count(channel, queue, 0) == 0
    assert channel.basic_get(queue, auto_ack=True)[2] is None


def test_nack_with_requeue_at_the_commit(running: Running, channel: BlockingChannel) -> None:
    queue = declared(channel)
    publish(channel, queue, b"again")
    tx = channel.connection.channel()
    tx.tx_select()
    tag, _, _ = got(tx, queue)
    tx.basic_nack(tag, requeue=True)
    tx.tx_commit()
    assert got(channel, queue)[1:] == (b"again", True)


def test_a_settled_tag_is_unknown_within_the_transaction(
    running: Running, channel: BlockingChannel
) -> None:
    queue = declared(channel)
    publish(channel, queue, b"a")
    tx = channel.connection.channel()
    tx.tx_select()
    tag, _, _ = got(tx, queue)
    tx.basic_ack(tag)
    with channel_closed(406, f"PRECONDITION_FAILED - unknown delivery tag {tag}"):
        tx.basic_ack(tag)
        tx.tx_commit()


def test_mandatory_unroutable_returns_at_the_commit(
    running: Running, channel: BlockingChannel
) -> None:
    returned: list[bytes] = []
    tx = channel.connection.channel()
    tx.add_on_return_callback(lambda _ch, _m, _p, body: returned.append(body))
    tx.tx_select()
    tx.basic_publish("amq.direct", unique("nowhere"), b"lost", mandatory=True)
    tx.tx_commit()
    wait_for(lambda: returned == [b"lost"], channel.connection, what="the Basic.Return")


def test_a_missing_exchange_refuses_the_commit(running: Running, channel: BlockingChannel) -> None:
    queue = declared(channel)
    publish(channel, queue, b"held")
    tx = channel.connection.channel()
    tx.tx_select()
    tag, _, _ = got(tx, queue)
    tx.basic_ack(tag)
    tx.basic_publish(unique("missing"), "k", b"x")
    with channel_closed(404):
        tx.tx_commit()
    # The commit failed before its ack: the message is back, as on any channel close.
    assert got(channel, queue)[1:] == (b"held", True)


@pytest.mark.parametrize("method", ["tx_commit", "tx_rollback"])
def test_commit_and_rollback_need_tx_select(channel: BlockingChannel, method: str) -> None:
    with channel_closed(406, "PRECONDITION_FAILED - channel is not transactional"):
        getattr(channel, method)()


def test_tx_and_confirm_modes_exclude_each_other(connection: pika.BlockingConnection) -> None:
    confirming = connection.channel()
    confirming.confirm_delivery()
    with channel_closed(406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode"):
        confirming.tx_select()
    transactional = connection.channel()
    transactional.tx_select()
    transactional.tx_select()  # a second Tx.Select is fine
    with channel_closed(406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode"):
        transactional.confirm_delivery()


def test_aio_pika_transaction_context(running: Running) -> None:
    """aio-pika's ``channel.transaction()``: committed on leaving the block, rolled back when
    the block raises."""
    queue_name = unique("tx-aio")

    async def scenario() -> list[bytes]:
        connection = await aio_pika.connect(amqp_url(running.port))
        async with connection:
            channel = await connection.channel(publisher_confirms=False)
            queue = await channel.declare_queue(queue_name)
            async with channel.transaction():
                await channel.default_exchange.publish(aio_pika.Message(b"kept"), queue_name)
            with pytest.raises(RuntimeError):
                async with channel.transaction():
                    await channel.default_exchange.publish(
                        aio_pika.Message(b"rolled back"), queue_name
                    )
                    raise RuntimeError("the application failed")
            bodies: list[bytes] = []
            async with asyncio.timeout(30):
                while not bodies:
                    message: Any = await queue.get(no_ack=True, fail=False)
                    if message is not None:
                        bodies.append(message.body)
            assert await queue.get(no_ack=True, fail=False) is None
            return bodies

    assert asyncio.run(scenario()) == [b"kept"]


def test_a_transaction_over_the_limit_closes_the_channel(
    running: Running, channel: BlockingChannel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RabbitMQ has no limit; the gateway holds at most MAX_TX_BYTES uncommitted (lowered
    here): the publish beyond it is refused with 406 naming the limit, nothing of the
    transaction is published, the connection stays."""
    limit = 4 * (1000 + transaction.MESSAGE_OVERHEAD)
    monkeypatch.setattr(transaction, "MAX_TX_BYTES", limit)
    queue = declared(channel)
    tx = channel.connection.channel()
    tx.tx_select()
    text = (
        f"PRECONDITION_FAILED - transaction exceeds the gateway's limit of {limit} bytes of "
        "uncommitted messages; commit more often"
    )
    with channel_closed(406, text):
        publish(tx, queue, *[b"x" * 1000] * 5)
        tx.tx_commit()
    assert channel.basic_get(queue, auto_ack=True)[2] is None
