"""Arguments end to end with pika: RabbitMQ's validation, and 406 for what is not implemented.

An argument that changes what RabbitMQ does and that the gateway does not implement is refused
at declare, naming it; nothing is created. See docs/compatibility.md for every decision.
"""

from __future__ import annotations

from typing import Any

import pytest
from pika.adapters.blocking_connection import BlockingChannel

from tests.integration.clients.conftest import Running
from tests.support.clients import channel_closed, unique

NOT_OURS = "not implemented by Starlight for RabbitMQ"


def _invalid(arg: str, kind: str, name: str, reason: str) -> str:
    return f"PRECONDITION_FAILED - invalid arg '{arg}' for {kind} '{name}' in vhost '/': {reason}"


@pytest.mark.parametrize(
    "arguments",
    [
        {"x-delivery-limit": 3, "x-queue-type": "quorum"},
    ],
    ids=lambda arguments: "+".join(arguments),
)
def test_unimplemented_queue_arguments_are_refused(
    running: Running, arguments: dict[str, Any]
) -> None:
    name = unique("q")
    connection = running.connect()
    first = next(iter(arguments))
    with channel_closed(406, _invalid(first, "queue", name, NOT_OURS)):
        connection.channel().queue_declare(name, arguments=arguments)
    with channel_closed(404):  # nothing was created
        connection.channel().queue_declare(name, passive=True)
    connection.close()


@pytest.mark.parametrize(
    ("arguments", "argument", "reason"),
    [
        ({"x-message-ttl": -1}, "x-message-ttl", "{value_negative,-1}"),
        ({"x-expires": 0}, "x-expires", "{value_zero,0}"),
        ({"x-max-length": "ten"}, "x-max-length", '"expected integer, got longstr"'),
        ({"x-max-priority": 256}, "x-max-priority", "{max_value_exceeded,256}"),
        ({"x-overflow": "drop-tail"}, "x-overflow", "invalid_overflow"),
        (
            {"x-dead-letter-routing-key": "k"},
            "x-dead-letter-routing-key",
            "routing_key_but_no_dlx_defined",
        ),
        ({"x-queue-type": "fifo"}, "x-queue-type", "\"unsupported queue type 'fifo'\""),
        ({"x-queue-type": "stream", "x-max-age": "1W"}, "x-max-age", "invalid_max_age"),
    ],
)
def test_invalid_values_get_rabbitmqs_reasons(
    channel: BlockingChannel, arguments: dict[str, Any], argument: str, reason: str
) -> None:
    name = unique("q")
    with channel_closed(406, _invalid(argument, "queue", name, reason)):
        channel.queue_declare(name, durable=True, arguments=arguments)


def test_arguments_of_another_queue_type(channel: BlockingChannel) -> None:
    name = unique("q")
    text = (
        f"PRECONDITION_FAILED - invalid arg 'x-max-age' for queue '{name}' in vhost '/' of "
        "queue type rabbit_classic_queue"
    )
    with channel_closed(406, text):
        channel.queue_declare(name, arguments={"x-max-age": "1D"})


def test_accepted_arguments(running: Running) -> None:
    """Classic and quorum queues, RabbitMQ's no-ops, and arguments no queue type knows."""
    connection = running.connect()
    channel = connection.channel()
    for arguments in (
        {"x-queue-type": "classic"},
        {"x-queue-mode": "lazy", "x-queue-version": 2},
        {"x-queue-leader-locator": "balanced"},
        {"x-custom": "anything", "plain": 1},
        {"x-dead-letter-exchange": "dlx"},
        {"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "k"},
        {"x-message-ttl": 1000},
        {"x-max-length": 10, "x-overflow": "reject-publish-dlx"},
        {"x-expires": 60_000},
    ):
        name = unique("q")
        channel.queue_declare(name, arguments=arguments)
        channel.queue_declare(name, arguments=arguments)  # and redeclared
    quorum = unique("quorum")
    channel.queue_declare(
        quorum, durable=True, arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 3}
    )
    channel.basic_publish("", quorum, b"m")
    _, _, body = channel.basic_get(quorum, auto_ack=True)
    assert body == b"m"
    connection.close()


@pytest.mark.parametrize(
    ("flags", "prop"),
    [
        ({"durable": False}, "non-durable"),
        ({"durable": True, "exclusive": True}, "exclusive-owner"),
        ({"durable": True, "auto_delete": True}, "auto-delete"),
    ],
)
def test_quorum_queues_are_durable_shared_and_kept(
    channel: BlockingChannel, flags: dict[str, bool], prop: str
) -> None:
    name = unique("quorum")
    text = f"PRECONDITION_FAILED - invalid property '{prop}' for queue '{name}' in vhost '/'"
    with channel_closed(406, text):
        channel.queue_declare(name, arguments={"x-queue-type": "quorum"}, **flags)


def test_alternate_exchange_must_name_an_exchange(channel: BlockingChannel) -> None:
    name = unique("x")
    text = (
        f"PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in "
        f"exchange '{name}' in vhost '/'"
    )
    with channel_closed(406, text):
        channel.exchange_declare(name, "direct", arguments={"alternate-exchange": 1})


def test_other_exchange_arguments_are_kept(channel: BlockingChannel) -> None:
    channel.exchange_declare(unique("x"), "topic", arguments={"x-custom": 1})


def test_consumer_priority_must_be_an_integer(channel: BlockingChannel) -> None:
    name = unique("q")
    channel.queue_declare(name)
    reason = '"expected integer, got longstr"'
    with channel_closed(406, _invalid("x-priority", "queue", name, reason)):
        channel.basic_consume(name, lambda *_: None, arguments={"x-priority": "high"})


def test_stream_offset_on_a_classic_queue(channel: BlockingChannel) -> None:
    name = unique("q")
    channel.queue_declare(name)
    text = (
        f"PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue '{name}' in vhost '/' "
        "of queue type rabbit_classic_queue"
    )
    with channel_closed(406, text):
        channel.basic_consume(name, lambda *_: None, arguments={"x-stream-offset": "first"})
