"""Priority queues across two replicas: a backlog published through both is delivered in
priority order by a consumer on either, and Basic.Get on the other takes the highest; what a
consumer on one replica holds reaches a consumer on the other once it lets go."""

from __future__ import annotations

from typing import Any

import pika
import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.priorities import MIX, rabbitmq_order
from tests.support.thread_replicas import channel_on, pump_until

pytestmark = pytest.mark.integration


def confirmed_on(gateway: GatewayInThread) -> Any:
    channel = channel_on(gateway)
    channel.confirm_delivery()
    return channel


def test_a_backlog_published_through_both_replicas_comes_by_priority(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (confirmed_on(gateway) for gateway in replicas)
    a.queue_declare("prio-both", arguments={"x-max-priority": 10})
    b.queue_declare("prio-both", arguments={"x-max-priority": 10})  # equivalent redeclare
    for index, (body, priority) in enumerate(MIX):
        channel = a if index % 2 else b
        channel.basic_publish(
            "", "prio-both", body.encode(), pika.BasicProperties(priority=priority)
        )
    got: list[str] = []
    b.basic_qos(prefetch_count=1)

    def on_message(ch: Any, method: Any, _props: Any, body: bytes) -> None:
        got.append(body.decode())
        ch.basic_ack(method.delivery_tag)

    b.basic_consume("prio-both", on_message)
    pump_until(b, lambda: len(got) == len(MIX), timeout=30)
    # Published alternately through two replicas, the messages reach Pulsar in that order.
    assert got == rabbitmq_order(MIX, 10)


def test_basic_get_on_the_other_replica_takes_the_highest(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (confirmed_on(gateway) for gateway in replicas)
    a.queue_declare("prio-get", arguments={"x-max-priority": 5})
    for body, priority in [(b"low", 1), (b"high", 5), (b"mid", 3)]:
        a.basic_publish("", "prio-get", body, pika.BasicProperties(priority=priority))
    bodies = []
    for _ in range(3):
        _method, _props, body = b.basic_get("prio-get", auto_ack=True)
        bodies.append(body)
    assert bodies == [b"high", b"mid", b"low"]


def test_what_one_replica_holds_reaches_the_other_when_it_lets_go(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (confirmed_on(gateway) for gateway in replicas)
    a.queue_declare("prio-held", arguments={"x-max-priority": 5})
    for n in range(10):
        a.basic_publish("", "prio-held", f"old{n}".encode(), pika.BasicProperties(priority=1))
    # A consumer on replica A takes one and holds it unacknowledged; its reader holds the rest.
    held: list[bytes] = []
    a.basic_qos(prefetch_count=1)
    a.basic_consume("prio-held", lambda ch, m, p, body: held.append(body))
    pump_until(a, lambda: len(held) == 1)
    got: list[bytes] = []
    b.basic_qos(prefetch_count=1)
    b.basic_consume("prio-held", lambda ch, m, p, body: got.append(body), auto_ack=True)
    # A's reader holds the backlog (its window is larger): B gets what comes next.
    b.basic_publish("", "prio-held", b"new", pika.BasicProperties(priority=5))
    pump_until(b, lambda: got == [b"new"], timeout=15)
    a.connection.close()  # A's messages go back to the queue, and so to B
    pump_until(b, lambda: len(got) == 11, timeout=30)
    assert sorted(got[1:]) == sorted(f"old{n}".encode() for n in range(10))
