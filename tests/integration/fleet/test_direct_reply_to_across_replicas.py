"""Direct reply-to across two replicas: the requester on one, the RPC server on the other; the
reply reaches the requester through its own replica's reply topic."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on, pump_until

pytestmark = pytest.mark.integration


REPLY_TO = "amq.rabbitmq.reply-to"


def request(requester: Any, body: bytes, correlation_id: str) -> None:
    requester.basic_publish(
        "", "rpc", body, pika.BasicProperties(reply_to=REPLY_TO, correlation_id=correlation_id)
    )


def take_request(server: Any) -> tuple[Any, bytes]:
    got: list[tuple[Any, bytes]] = []

    def one() -> bool:
        method, props, body = server.basic_get("rpc", auto_ack=True)
        if method is not None:
            got.append((props, body))
        return bool(got)

    pump_until(server, one)
    return got[0]


def test_a_reply_published_on_another_replica_reaches_the_requester(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    requester = channel_on(a)
    requester.queue_declare("rpc")
    replies: list[tuple[str, bytes]] = []
    requester.basic_consume(
        REPLY_TO, lambda ch, m, p, body: replies.append((p.correlation_id, body)), auto_ack=True
    )
    server = channel_on(b)
    server.confirm_delivery()
    for n in range(3):
        request(requester, f"q{n}".encode(), str(n))
        props, body = take_request(server)
        # Mandatory and confirmed: RabbitMQ counts a reply name as routed.
        server.basic_publish(
            "",
            props.reply_to,
            b"re: " + body,
            pika.BasicProperties(correlation_id=props.correlation_id),
            mandatory=True,
        )
    expected = [("0", b"re: q0"), ("1", b"re: q1"), ("2", b"re: q2")]
    pump_until(requester, lambda: replies == expected)


def test_a_reply_for_a_gone_requester_on_another_replica_is_dropped(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = replicas
    requester = channel_on(a)
    requester.queue_declare("rpc")
    requester.basic_consume(REPLY_TO, lambda *_: None, auto_ack=True, consumer_tag="replies")
    request(requester, b"q", "1")
    server = channel_on(b)
    props, _ = take_request(server)
    requester.basic_cancel("replies")
    server.confirm_delivery()
    server.basic_publish("", props.reply_to, b"late", mandatory=True)
    # A new requester on the same channel gets a new name: the late reply is not its own.
    got: list[bytes] = []
    requester.basic_consume(REPLY_TO, lambda ch, m, p, body: got.append(body), auto_ack=True)
    request(requester, b"q2", "2")
    props2, _ = take_request(server)
    assert props2.reply_to != props.reply_to
    server.basic_publish("", props2.reply_to, b"fresh")
    pump_until(requester, lambda: got == [b"fresh"])
