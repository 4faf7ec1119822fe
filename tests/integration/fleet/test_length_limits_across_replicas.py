"""Length limits across two replicas: the count is the fleet's (taken from Pulsar), so
publishes through either replica fill the same queue, and one trimmer (the leader) drops."""

from __future__ import annotations

import time
from typing import Any

import pika.exceptions
import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on

pytestmark = pytest.mark.integration


DEADLINE = 20.0


def confirmed_on(gateway: GatewayInThread) -> Any:
    channel = channel_on(gateway)
    channel.confirm_delivery()
    return channel


def drain(channel: Any, queue: str) -> list[bytes]:
    bodies = []
    while True:
        method, _, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return bodies
        bodies.append(body)


def test_reject_publish_counts_both_replicas_publishes(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (confirmed_on(gateway) for gateway in replicas)
    a.queue_declare("bounded", arguments={"x-max-length": 3, "x-overflow": "reject-publish"})
    b.queue_declare("bounded", passive=True)
    a.basic_publish("", "bounded", b"a0")
    b.basic_publish("", "bounded", b"b0")
    a.basic_publish("", "bounded", b"a1")
    with pytest.raises(pika.exceptions.NackError):
        b.basic_publish("", "bounded", b"b1")
    with pytest.raises(pika.exceptions.NackError):
        a.basic_publish("", "bounded", b"a2")
    assert drain(b, "bounded") == [b"a0", b"b0", b"a1"]


def test_drop_head_keeps_the_newest_of_both_replicas(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (confirmed_on(gateway) for gateway in replicas)
    a.queue_declare("latest", arguments={"x-max-length": 2})
    b.queue_declare("latest", passive=True)
    for n in range(3):
        a.basic_publish("", "latest", f"a{n}".encode())
    for n in range(3):
        b.basic_publish("", "latest", f"b{n}".encode())
    deadline = time.monotonic() + DEADLINE
    while (count := a.queue_declare("latest", passive=True).method.message_count) != 2:
        assert time.monotonic() < deadline, f"latest counts {count}"
        a.connection.process_data_events(time_limit=0.1)
    assert drain(a, "latest") == [b"b1", b"b2"]
