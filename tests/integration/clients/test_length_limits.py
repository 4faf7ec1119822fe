"""Queue length limits (``x-max-length``, ``x-overflow``) end to end, on both backends.

RabbitMQ (docs/maxlength.md): only ready messages count; ``drop-head`` (the default) drops or
dead-letters (reason ``maxlen``) the oldest; ``reject-publish`` refuses the newest, the
publisher gets Basic.Nack under confirms and the other queues it was routed to still get it;
``reject-publish-dlx`` also dead-letters it. On Pulsar drop-head is applied by the leader a
moment after the publish (docs/compatibility.md "Length limits"), so the tests wait for the
count rather than expect it at once.
"""

from __future__ import annotations

import time

import pika
import pika.exceptions
import pytest

from tests.integration.clients.conftest import Running
from tests.support.clients import (
    aio_pika_outcomes,
    assert_count_reaches,
    confirmed_channel,
    drain,
    unique,
    wait_for_message,
)


def test_drop_head_keeps_the_newest(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-max-length": 2})
    for n in range(5):
        channel.basic_publish("", queue, f"m{n}".encode())
    assert_count_reaches(channel, queue, 2)
    assert drain(channel, queue) == [b"m3", b"m4"]
    channel.connection.close()


def test_drop_head_dead_letters_the_oldest(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue, dead = unique("q"), unique("dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        queue,
        arguments={
            "x-max-length": 1,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead,
        },
    )
    for n in range(3):
        channel.basic_publish("", queue, f"m{n}".encode())
    assert_count_reaches(channel, queue, 1)
    assert drain(channel, queue) == [b"m2"]
    letters = [wait_for_message(channel, dead) for _ in range(2)]
    assert [body for _, _, body in letters] == [b"m0", b"m1"]
    for _, properties, _ in letters:
        [death] = properties.headers["x-death"]
        assert (death["queue"], death["reason"]) == (queue, "maxlen")
    channel.connection.close()


def test_reject_publish_nacks_what_does_not_fit(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    channel.basic_publish("", queue, b"m0")
    channel.basic_publish("", queue, b"m1")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", queue, b"m2")
    # Unacknowledged messages do not count: one taken and held makes room for one.
    method, _, body = wait_for_message(channel, queue, auto_ack=False)
    assert body == b"m0"
    channel.basic_publish("", queue, b"m3")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", queue, b"m4")
    channel.basic_ack(method.delivery_tag)
    assert drain(channel, queue) == [b"m1", b"m3"]
    channel.connection.close()


def test_a_full_queue_does_not_keep_the_message_from_the_others(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    fanout, full, other = unique("fan"), unique("full"), unique("other")
    channel.exchange_declare(fanout, "fanout")
    channel.queue_declare(full, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.queue_declare(other)
    channel.queue_bind(full, fanout)
    channel.queue_bind(other, fanout)
    channel.basic_publish(fanout, "", b"first")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish(fanout, "", b"second")
    assert [wait_for_message(channel, other)[2] for _ in range(2)] == [b"first", b"second"]
    assert drain(channel, full) == [b"first"]
    channel.connection.close()


def test_reject_publish_dlx_dead_letters_the_refused(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue, dead = unique("q"), unique("dead")
    channel.queue_declare(dead)
    channel.queue_declare(
        queue,
        arguments={
            "x-max-length": 1,
            "x-overflow": "reject-publish-dlx",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": dead,
        },
    )
    channel.basic_publish("", queue, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", queue, b"refused")
    _, properties, body = wait_for_message(channel, dead)
    assert body == b"refused"
    [death] = properties.headers["x-death"]
    assert (death["queue"], death["reason"]) == (queue, "maxlen")
    assert drain(channel, queue) == [b"kept"]
    channel.connection.close()


def test_overflow_without_a_limit_does_nothing(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue = unique("q")
    channel.queue_declare(queue, arguments={"x-overflow": "reject-publish"})
    for n in range(3):
        channel.basic_publish("", queue, f"m{n}".encode())
    deadline = time.monotonic() + 10
    while channel.queue_declare(queue, passive=True).method.message_count != 3:
        assert time.monotonic() < deadline
    channel.connection.close()


def test_aio_pika_publish_to_a_full_queue_is_nacked(running: Running) -> None:
    arguments: dict[str, int | str] = {"x-max-length": 1, "x-overflow": "reject-publish"}
    assert aio_pika_outcomes(running.port, arguments, [b"fits", b"does not"]) == ["ack", "nack"]
