"""Queue expiry (``x-expires``) end to end, on both backends.

RabbitMQ (docs/ttl.md, "Queue TTL"): a queue unused (no consumers, no redeclare, no Basic.Get)
for its ``x-expires`` is deleted, never sooner; how promptly is not guaranteed; its messages
are not dead-lettered.
"""

from __future__ import annotations

import time
from typing import Any

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import unique

DEADLINE = 20.0


def exists(running: Running, queue: str) -> bool:
    connection = running.connect()
    try:
        connection.channel().queue_declare(queue, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as closed:
        assert closed.reply_code == 404
        return False
    finally:
        if connection.is_open:
            connection.close()


def wait_gone(running: Running, queue: str) -> float:
    """Until ``queue`` is deleted; returns when (time.time())."""
    deadline = time.monotonic() + DEADLINE
    while exists(running, queue):
        assert time.monotonic() < deadline, f"{queue} was not deleted"
        time.sleep(0.05)  # polling interval of a condition with a deadline
    return time.time()


def keep_using(channel: BlockingChannel, seconds: float, use: Any) -> None:
    """Use the queue (``use()``) every 0.2 s for ``seconds``."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        use()
        channel.connection.process_data_events(time_limit=0.2)


def test_an_unused_queue_is_deleted_after_its_expiry(running: Running) -> None:
    channel = running.connect().channel()
    queue, dead = unique("q"), unique("dead")
    channel.queue_declare(dead)
    declared = time.time()
    channel.queue_declare(
        queue,
        arguments={
            "x-expires": 800,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead,
        },
    )
    channel.basic_publish("", queue, b"goes with the queue")
    gone = wait_gone(running, queue)
    assert gone >= declared + 0.8  # never before its time
    # Messages of an expired queue are not dead-lettered (RabbitMQ).
    assert channel.queue_declare(dead, passive=True).method.message_count == 0
    channel.connection.close()


def test_basic_get_and_redeclare_keep_a_queue(running: Running) -> None:
    channel = running.connect().channel()
    by_get, by_declare = unique("get"), unique("declare")
    arguments = {"x-expires": 1200}
    channel.queue_declare(by_get, arguments=arguments)
    channel.queue_declare(by_declare, arguments=arguments)

    def use() -> None:
        channel.basic_get(by_get, auto_ack=True)
        channel.queue_declare(by_declare, arguments=arguments)

    keep_using(channel, 3.0, use)  # 2.5 expiries: each use renews the lease
    assert exists(running, by_get) and exists(running, by_declare)
    wait_gone(running, by_get)
    wait_gone(running, by_declare)
    channel.connection.close()


def test_a_consumer_keeps_a_queue(running: Running) -> None:
    channel = running.connect().channel()
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-expires": 800})
    tag = channel.basic_consume(queue, lambda *args: None, auto_ack=True)
    keep_using(channel, 2.5, lambda: None)
    assert exists(running, queue)
    channel.basic_cancel(tag)
    wait_gone(running, queue)
    channel.connection.close()
