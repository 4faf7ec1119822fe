"""Single active consumer and consumer priorities across two replicas: the line of a
single-active-consumer queue is fleet-wide (one active consumer among both replicas' consumers,
the next one on the other replica takes over in order), a quorum queue's active consumer steps
down for a higher priority on the other replica once it settled what it holds, and a consumer
of higher priority on one replica gets a plain queue's messages before one on the other."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.thread_replicas import channel_on

pytestmark = pytest.mark.integration


SAC = {"x-single-active-consumer": True}
QUORUM_SAC = {"x-queue-type": "quorum", "x-single-active-consumer": True}
# How long both sides are pumped to see that nothing more arrives.
QUIET = 1.0


def pump(
    channels: list[Any],
    condition: Callable[[], bool],
    timeout: float = 20.0,
    what: Callable[[], str] = lambda: "condition",
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not met in time: {what()}"
        for channel in channels:
            channel.connection.process_data_events(time_limit=0.02)


def quiet(channels: list[Any]) -> None:
    """Pump every channel for QUIET seconds (what was wrongly sent arrives meanwhile)."""
    until = time.monotonic() + QUIET
    pump(channels, lambda: time.monotonic() > until)


class Got:
    def __init__(self) -> None:
        self.messages: list[tuple[bytes, bool, int]] = []  # body, redelivered, tag

    def __call__(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self.messages.append((body, method.redelivered, method.delivery_tag))

    @property
    def bodies(self) -> list[bytes]:
        return [body for body, _, _ in self.messages]


def bodies(count: int) -> list[bytes]:
    return [f"m{n}".encode() for n in range(count)]


def test_one_active_consumer_in_the_fleet_then_the_next_on_the_other_replica(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (channel_on(gateway) for gateway in replicas)
    producer = channel_on(replicas[0])
    producer.confirm_delivery()
    a.queue_declare("sac-fleet", arguments=SAC)
    a.basic_qos(prefetch_count=2)
    first, second = Got(), Got()
    a.basic_consume("sac-fleet", first)  # the first registered: active
    b.basic_consume("sac-fleet", second, auto_ack=True)
    sent = bodies(8)
    for body in sent:
        producer.basic_publish("", "sac-fleet", body)
    pump([a, b], lambda: len(first.messages) == 2)
    a.basic_ack(first.messages[0][2])
    pump([a, b], lambda: len(first.messages) == 3)
    quiet([a, b])
    assert first.bodies == sent[:3]  # the active one, even while its prefetch is full
    assert second.messages == []
    a.connection.close()  # two unacknowledged go back; the consumer on B takes over
    pump([b], lambda: len(second.messages) == 7)
    assert second.bodies == sent[1:]
    assert [flag for _, flag, _ in second.messages] == [True] * 2 + [False] * 5
    b.connection.close()
    producer.connection.close()


def test_a_quorum_queue_hands_over_to_a_higher_priority_on_the_other_replica(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (channel_on(gateway) for gateway in replicas)
    a.queue_declare("sac-fleet-quorum", durable=True, arguments=QUORUM_SAC)
    a.confirm_delivery()
    sent = bodies(6)
    for body in sent:
        a.basic_publish("", "sac-fleet-quorum", body)
    a.basic_qos(prefetch_count=2)
    first, higher = Got(), Got()
    a.basic_consume("sac-fleet-quorum", first)
    pump([a], lambda: len(first.messages) == 2)
    b.basic_consume("sac-fleet-quorum", higher, auto_ack=True, arguments={"x-priority": 3})
    # A's replica hears of B's consumer through its view, milliseconds after Consume-Ok on B
    # (docs/compatibility.md, "Single active consumer"): an ack before that frees a place
    # that A's consumer, not yet quiescing, would fill. Once A's view counts both consumers:
    pump(
        [a, b],
        lambda: a.queue_declare("sac-fleet-quorum", passive=True).method.consumer_count == 2,
    )
    # A's consumer quiesces: nothing new while it holds one of its two.
    a.basic_ack(first.messages[0][2])
    quiet([a, b])
    assert first.bodies == sent[:2]
    assert higher.messages == []
    a.basic_ack(first.messages[1][2])  # all settled: B's takes over
    pump([a, b], lambda: len(higher.messages) == 4)
    quiet([a, b])
    assert higher.bodies == sent[2:]
    assert len(first.messages) == 2
    a.connection.close()
    b.connection.close()


def test_a_higher_priority_consumer_on_the_other_replica_gets_the_messages(
    replicas: tuple[GatewayInThread, GatewayInThread],
) -> None:
    a, b = (channel_on(gateway) for gateway in replicas)
    producer = channel_on(replicas[0])
    producer.confirm_delivery()
    a.queue_declare("prio-fleet")
    # The queue's topic is made when the first message is published to it (docs/fleet.md,
    # "Lazy subscriptions"), and a consumer on the other replica reads it once its view
    # shows it, milliseconds later: a first message taken on B makes sure it does, so that
    # what follows shows the priorities alone.
    producer.basic_publish("", "prio-fleet", b"first")
    pump([b], lambda: b.basic_get("prio-fleet", auto_ack=True)[2] == b"first")
    low, high = Got(), Got()
    a.basic_consume("prio-fleet", low, auto_ack=True)  # registered first, priority 0
    b.basic_consume("prio-fleet", high, auto_ack=True, arguments={"x-priority": 10})
    sent = bodies(30)
    for body in sent:
        producer.basic_publish("", "prio-fleet", body)
    pump([a, b], lambda: len(high.messages) == 30, what=lambda: f"{high.bodies} {low.bodies}")
    quiet([a, b])
    assert high.bodies == sent
    assert low.messages == []
    for channel in (a, b, producer):
        channel.connection.close()
