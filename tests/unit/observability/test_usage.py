"""Usage windows and the publisher's carry-over, with an in-memory Pulsar stand-in."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from gateway.observability.counters import ProcessCounters
from gateway.observability.usage import UsageWindows
from gateway.observability.usage_event import UsageEvent
from gateway.server.usage_publisher import UsagePublisher


def windows(counters: ProcessCounters) -> UsageWindows:
    return UsageWindows(
        counters,
        "rabbit@a.1",
        lambda vhost: "public/default" if vhost == "/" else f"public/{vhost}",
        0,
    )


def test_events_carry_deltas_and_skip_idle_vhosts() -> None:
    counters = ProcessCounters()
    cut = windows(counters)
    vhost = counters.vhost("/")
    vhost.received, vhost.received_bytes = 3, 30
    vhost.delivered_consume_auto_ack, vhost.acknowledged = 2, 1
    counters.vhost("idle")
    (first,) = cut.cut(1000)
    assert (first.published_messages, first.published_bytes) == (3, 30)
    assert first.delivered_messages == 2
    assert first.acknowledged_messages == 3  # one Basic.Ack + two auto-acked deliveries
    assert (first.window_start_ms, first.window_end_ms) == (0, 1000)
    assert first.event_id == "rabbit@a.1:0" and first.namespace == "public/default"
    vhost.received = 5
    (second,) = cut.cut(2000)
    assert second.published_messages == 2 and second.sequence == 1
    assert second.window_start_ms == 1000
    assert cut.cut(3000) == []  # nothing happened, no connection: no event


def test_connections_make_a_vhost_active_and_peak_is_per_window() -> None:
    counters = ProcessCounters()
    cut = windows(counters)
    vhost = counters.vhost("/")
    vhost.connection_opened()
    vhost.connection_opened()
    vhost.connection_closed()
    (event,) = cut.cut(10)
    assert (event.connections, event.peak_connections) == (1, 2)
    (event,) = cut.cut(20)
    assert (event.connections, event.peak_connections) == (1, 1)


class FlakyProducer:
    def __init__(self) -> None:
        self.failing = True
        self.sent: list[tuple[UsageEvent, int]] = []

    def send(self, event: UsageEvent, sequence_id: int) -> None:
        if self.failing:
            raise TimeoutError("Pulsar is away")
        self.sent.append((event, sequence_id))

    def close(self) -> None:
        pass


class FakeWrapper:
    def __init__(self, producer: FlakyProducer) -> None:
        self.producer = producer
        self.names: list[str] = []

    def create_producer(self, topic: str, *, producer_name: str, **_: Any) -> FlakyProducer:
        self.names.append(producer_name)
        return self.producer


class FakeClient:
    def __init__(self, wrapper: FakeWrapper) -> None:
        self.wrapper = wrapper


class FakeAdmin:
    def __init__(self) -> None:
        self.posts: list[tuple[str, str, Any]] = []

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        return True

    async def create_namespace(self, tenant: str, namespace: str) -> bool:
        raise AssertionError("exists")

    async def request(self, method: str, path: str, *, body: Any = None) -> None:
        self.posts.append((method, path, body))


@pytest.mark.trio
async def test_counts_survive_an_outage_and_a_retry_resends_the_same_event() -> None:
    counters = ProcessCounters()
    producer = FlakyProducer()
    wrapper = FakeWrapper(producer)
    admin = FakeAdmin()
    publisher = UsagePublisher(
        windows(counters),
        FakeClient(wrapper),  # type: ignore[arg-type]
        admin,  # type: ignore[arg-type]
        "persistent://public/sys/usage",
        1.0,
    )
    vhost = counters.vhost("/")
    vhost.received = 4
    await publisher.tick()  # Pulsar away: the event waits
    vhost.received = 10  # counted during the outage
    await publisher.tick()  # still away: no new window cut
    producer.failing = False
    await publisher.tick()  # the waiting event goes out, unchanged
    await publisher.tick()  # then a window with what came during the outage
    await trio.lowlevel.checkpoint()
    assert [(e.sequence, e.published_messages, seq) for e, seq in producer.sent] == [
        (0, 4, 1),
        (1, 6, 2),
    ]
    assert sum(e.published_messages for e, _ in producer.sent) == 10
    assert counters.usage_events_published == 2 and counters.usage_event_failures == 2
    # A failed send gets a fresh producer, under the same name: deduplication keys on it.
    assert set(wrapper.names) == {"rabbit@a.1"} and len(wrapper.names) == 3
    assert admin.posts == [("POST", "/admin/v2/namespaces/public/sys/deduplication", True)]
