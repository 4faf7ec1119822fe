"""``x-max-length-bytes`` end to end with pika and aio-pika.

RabbitMQ (docs/maxlength.md, rabbit_amqqueue_process): the limit bounds the total **body**
bytes of a queue's **ready** messages (properties and headers do not count, nor do messages
delivered and not yet acknowledged); with ``x-max-length`` too, whichever is hit first
applies. A publish overflows when the bytes after it would be over the limit
(``will_overflow``): ``reject-publish`` refuses it (Basic.Nack), ``reject-publish-dlx`` also
dead-letters it; ``drop-head`` drops (or dead-letters, reason ``maxlen``) the head while the
queue is over a limit, after each publish and each requeue (``maybe_drop_head``).

The in-memory backend implements it exactly. The Pulsar backend refuses it on classic and
quorum queues (406 naming it, nothing created): no replica knows the fleet's ready body bytes
(docs/compatibility.md, "Length limits"); a stream's ``x-max-length-bytes`` is its retention
(tests/integration/clients/test_streams.py).
"""

from __future__ import annotations

import time
from typing import Any

import pika
import pika.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import PULSAR_ONLY, Running
from tests.support.clients import (
    COUNT_DEADLINE,
    aio_pika_outcomes,
    channel_closed,
    confirmed_channel,
    drain,
    unique,
    wait_for_message,
)

MEMORY = pytest.mark.parametrize("running", ["memory"], indirect=True)


def published(channel: BlockingChannel, queue: str, body: bytes, **properties: Any) -> bool:
    """Whether the publish was confirmed (True) or nacked (False)."""
    try:
        channel.basic_publish("", queue, body, pika.BasicProperties(**properties))
    except pika.exceptions.NackError:
        return False
    return True


def count(channel: BlockingChannel, queue: str) -> int:
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def dead_lettered(channel: BlockingChannel, dead: str, n: int) -> list[bytes]:
    letters = [wait_for_message(channel, dead) for _ in range(n)]
    for _, properties, _ in letters:
        [death] = properties.headers["x-death"]
        assert death["reason"] == "maxlen"
    return [body for _, _, body in letters]


def dead_lettering(channel: BlockingChannel, **arguments: Any) -> tuple[str, str]:
    """A queue with ``arguments`` (``x_max_length_bytes=10`` for ``x-max-length-bytes``)
    dead-lettering into a new queue: their names."""
    queue, dead = unique("q"), unique("dead")
    channel.queue_declare(dead)
    limits = {"x-" + key.replace("_", "-"): value for key, value in arguments.items()}
    channel.queue_declare(
        queue,
        arguments={**limits, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead},
    )
    return queue, dead


@MEMORY
def test_drop_head_keeps_the_newest_bodies_that_fit(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue, dead = dead_lettering(channel, max_length_bytes=10)
    for n in range(4):
        assert published(channel, queue, f"m{n}xx".encode())  # 4 bytes each
    assert count(channel, queue) == 2
    assert dead_lettered(channel, dead, 2) == [b"m0xx", b"m1xx"]
    assert drain(channel, queue) == [b"m2xx", b"m3xx"]
    channel.connection.close()


@MEMORY
def test_a_body_over_the_limit_pushes_everything_out_itself_included(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue, dead = dead_lettering(channel, max_length_bytes=5)
    assert published(channel, queue, b"ab")
    assert published(channel, queue, b"abcdefgh")  # confirmed: drop-head never nacks
    assert count(channel, queue) == 0
    assert dead_lettered(channel, dead, 2) == [b"ab", b"abcdefgh"]
    channel.connection.close()


def rejecting(running: Running, max_bytes: int) -> tuple[BlockingChannel, str]:
    """A confirming channel and a new queue of ``max_bytes`` that rejects publishes."""
    channel = confirmed_channel(running.connect())
    queue = unique("q")
    channel.queue_declare(
        queue, arguments={"x-max-length-bytes": max_bytes, "x-overflow": "reject-publish"}
    )
    return channel, queue


@MEMORY
def test_reject_publish_nacks_what_does_not_fit_in_bytes(running: Running) -> None:
    channel, queue = rejecting(running, 10)
    assert published(channel, queue, b"123456")
    assert not published(channel, queue, b"12345")  # 11 bytes
    assert published(channel, queue, b"1234")  # exactly 10
    assert not published(channel, queue, b"x")
    assert published(channel, queue, b"")  # an empty body always fits
    # Unacknowledged messages do not count: the first one held frees its 6 bytes.
    method, _, body = wait_for_message(channel, queue, auto_ack=False)
    assert body == b"123456"
    assert published(channel, queue, b"abcdef")
    assert not published(channel, queue, b"x")
    channel.basic_ack(method.delivery_tag)
    assert drain(channel, queue) == [b"1234", b"", b"abcdef"]
    channel.connection.close()


@MEMORY
def test_headers_and_properties_do_not_count(running: Running) -> None:
    channel, queue = rejecting(running, 0)
    assert published(channel, queue, b"", headers={"big": "h" * 1000}, correlation_id="c" * 200)
    assert published(channel, queue, b"")
    assert not published(channel, queue, b"1")
    assert count(channel, queue) == 2
    channel.connection.close()


@MEMORY
def test_expired_messages_do_not_count(running: Running) -> None:
    channel, queue = rejecting(running, 5)
    assert published(channel, queue, b"12345", expiration="1")
    deadline = time.monotonic() + COUNT_DEADLINE
    while not published(channel, queue, b"abcde"):  # refused until the first one expired
        assert time.monotonic() < deadline
    assert drain(channel, queue) == [b"abcde"]
    channel.connection.close()


@MEMORY
def test_reject_publish_dlx_dead_letters_what_does_not_fit(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue, dead = dead_lettering(channel, max_length_bytes=4, overflow="reject-publish-dlx")
    assert published(channel, queue, b"kept")
    assert not published(channel, queue, b"refused")
    assert dead_lettered(channel, dead, 1) == [b"refused"]
    assert drain(channel, queue) == [b"kept"]
    channel.connection.close()


@MEMORY
def test_with_both_limits_whichever_is_hit_first_applies(running: Running) -> None:
    channel = confirmed_channel(running.connect())
    queue = unique("q")
    channel.queue_declare(
        queue,
        arguments={"x-max-length": 3, "x-max-length-bytes": 10, "x-overflow": "reject-publish"},
    )
    assert [published(channel, queue, body) for body in (b"1", b"2", b"3", b"4")] == [
        True,
        True,
        True,
        False,  # the count
    ]
    drain(channel, queue)
    assert [published(channel, queue, body) for body in (b"12345", b"12345", b"1")] == [
        True,
        True,
        False,  # the bytes
    ]
    channel.connection.close()


@MEMORY
def test_a_requeue_over_the_limit_drops_the_head(running: Running) -> None:
    """rabbit_amqqueue_process:requeue_and_run drops the head after putting messages back:
    the requeued message goes back to the head, and is the one to go."""
    channel = confirmed_channel(running.connect())
    queue, dead = dead_lettering(channel, max_length_bytes=10)
    assert published(channel, queue, b"first!")
    method, _, _ = wait_for_message(channel, queue, auto_ack=False)
    assert published(channel, queue, b"second")  # fits: the first is not ready
    channel.basic_nack(method.delivery_tag, requeue=True)
    assert dead_lettered(channel, dead, 1) == [b"first!"]
    assert drain(channel, queue) == [b"second"]
    channel.connection.close()


@MEMORY
def test_aio_pika_publish_over_the_byte_limit_is_nacked(running: Running) -> None:
    arguments: dict[str, int | str] = {"x-max-length-bytes": 8, "x-overflow": "reject-publish"}
    outcomes = aio_pika_outcomes(running.port, arguments, [b"fits", b"fits", b"!"])
    assert outcomes == ["ack", "ack", "nack"]


# One step: publish a body of this size, or take (and acknowledge) the head.
STEPS = st.lists(st.one_of(st.integers(0, 6), st.just(-1)), min_size=1, max_size=25)


@MEMORY
@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=STEPS,
    max_bytes=st.integers(0, 12),
    max_length=st.one_of(st.none(), st.integers(0, 4)),
    overflow=st.sampled_from(["drop-head", "reject-publish"]),
)
def test_publishes_follow_rabbitmqs_rules(
    running: Running,
    steps: list[int],
    max_bytes: int,
    max_length: int | None,
    overflow: str,
) -> None:
    """Against a plain model of RabbitMQ's rules: reject-publish nacks exactly the publishes
    that would take the queue over a limit; drop-head drops exactly the oldest; after each
    publish the ready bytes are within the limit."""
    channel = confirmed_channel(running.connect())
    queue = unique("q")
    arguments: dict[str, Any] = {"x-max-length-bytes": max_bytes, "x-overflow": overflow}
    if max_length is not None:
        arguments["x-max-length"] = max_length
    channel.queue_declare(queue, arguments=arguments)
    length_limit = 10**9 if max_length is None else max_length
    model: list[bytes] = []
    for n, step in enumerate(steps):
        if step < 0:
            method, _, body = channel.basic_get(queue, auto_ack=True)
            assert (method is None and not model) or body == model.pop(0)
            continue
        body = (str(n) * step)[:step].encode()
        overflows = len(model) + 1 > length_limit or sum(map(len, model)) + step > max_bytes
        if overflow == "reject-publish":
            assert published(channel, queue, body) == (not overflows)
            if not overflows:
                model.append(body)
        else:
            assert published(channel, queue, body)
            model.append(body)
            while model and (len(model) > length_limit or sum(map(len, model)) > max_bytes):
                model.pop(0)
        assert sum(map(len, model)) <= max_bytes
        assert count(channel, queue) == len(model)
    assert drain(channel, queue) == model
    channel.queue_delete(queue)
    channel.connection.close()


@pytest.mark.parametrize("running", [PULSAR_ONLY], indirect=True)
@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_pulsar_refuses_the_byte_limit(running: Running, queue_type: str) -> None:
    name = unique("q")
    connection = running.connect()
    reason = (
        "not implemented by Starlight for RabbitMQ on Pulsar "
        "(the body bytes of a queue's ready messages are not known fleet-wide)"
    )
    prefix = (
        f"PRECONDITION_FAILED - invalid arg 'x-max-length-bytes' for queue '{name}' in vhost '/'"
    )
    text = f"{prefix}: {reason}"
    with channel_closed(406, text):
        connection.channel().queue_declare(
            name, durable=True, arguments={"x-max-length-bytes": 1024, "x-queue-type": queue_type}
        )
    with channel_closed(404):  # nothing was created
        connection.channel().queue_declare(name, passive=True)
    # RabbitMQ's validation comes first: a bad value gets RabbitMQ's reason.
    with channel_closed(406, f"{prefix}: {{value_negative,-1}}"):
        connection.channel().queue_declare(name, arguments={"x-max-length-bytes": -1})
    connection.close()
