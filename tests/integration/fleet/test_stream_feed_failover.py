"""The leader's stream feed across a leader's death (kill -9): every message routed to the
stream through an exchange is in its log once, in its order, although the dead leader had copies
stored whose originals it had not acknowledged (backend/pulsar/queue_types/stream/copies.py: the
next leader's copies of those are dropped by Pulsar's deduplication).

Real gateway processes in a ZooKeeper chroot of their own with a short session timeout
(test_lifetimes.py explains both), the stack's Pulsar.
"""

from __future__ import annotations

import signal
import threading
from collections import Counter
from typing import Any

import httpx
import pytest

from gateway.model.naming import encode_local_name, subscription_for
from tests.support.clients import connect
from tests.support.fleet import (
    REAPED_WITHIN,
    Fleet,
    leader_of,
    process_of,
    two_replicas_and_their_leader,
)
from tests.support.fleet_clients import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(short_session_fleet: Fleet) -> Fleet:
    """Every replica here has a short ZooKeeper session, in a chroot of this test's own."""
    return short_session_fleet


STREAM = {"x-queue-type": "stream"}
# The leader dies once the log holds this many (the publisher is still publishing) ...
KILL_AFTER = 300
# ... and the publisher goes on for this many after the leader's death.
AFTER_KILL = 500
# A bound on the publisher, should the test never tell it that the leader died.
AT_MOST = 20_000


def topic_path(namespace: str, exchange: str, key: str | None) -> str:
    return f"/admin/v2/persistent/public/{namespace}/{encode_local_name(exchange, key)}"


def log_entries(web: httpx.Client, namespace: str, stream: str) -> int:
    """Entries in the stream's log (its producers do not batch on this stack: one each)."""
    response = web.get(topic_path(namespace, "", stream) + "/internalStats")
    return int(response.json().get("numberOfEntries") or 0) if response.is_success else 0


def waiting_to_be_fed(web: httpx.Client, namespace: str, stream: str) -> int | None:
    """Messages in the stream's subscription on the exchange topic (not yet acknowledged by a
    leader's feed); None before the subscription exists."""
    response = web.get(topic_path(namespace, "orders", "k") + "/stats")
    if not response.is_success:
        return None
    found = response.json().get("subscriptions", {}).get(subscription_for(stream))
    return None if found is None else int(found["msgBacklog"])


class Publisher(threading.Thread):
    """Publishes ``m0``, ``m1``, ... through the exchange, each confirmed before the next,
    until ``AFTER_KILL`` more after ``killed`` is set: the leader dies mid-stream whatever the
    pace of this machine."""

    def __init__(self, port: int) -> None:
        super().__init__(name="publisher", daemon=True)
        self.port = port
        self.confirmed = 0
        self.confirmed_at_kill: int | None = None
        self.killed = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            connection = connect(self.port)
            channel = connection.channel()
            channel.confirm_delivery()
            stop_at = AT_MOST
            for index in range(AT_MOST):
                if index == stop_at:
                    break
                if self.killed.is_set() and self.confirmed_at_kill is None:
                    self.confirmed_at_kill = self.confirmed
                    stop_at = index + AFTER_KILL
                channel.basic_publish("orders", "k", f"m{index}".encode())  # raises if nacked
                self.confirmed += 1
            connection.close()
        except BaseException as error:  # reported by the test
            self.error = error


def read_log(port: int, stream: str, count: int) -> list[bytes]:
    """The first ``count`` messages of the log, read from offset ``first``."""
    connection = connect(port)
    channel = connection.channel()
    channel.basic_qos(prefetch_count=200)
    bodies: list[bytes] = []

    def on_message(ch: Any, method: Any, _properties: Any, body: bytes) -> None:
        bodies.append(body)
        ch.basic_ack(method.delivery_tag)

    channel.basic_consume(stream, on_message, arguments={"x-stream-offset": "first"})
    wait_until(
        lambda: connection.process_data_events(time_limit=0.1) or len(bodies) >= count,
        timeout=120,
        what=lambda: f"the log's first {count} messages, read {len(bodies)}",
    )
    connection.close()
    return bodies


def test_a_leader_killed_mid_feed_leaves_each_message_in_the_log_once(
    fleet: Any, pulsar_stack: Any
) -> None:
    replicas, connections, leader, survivor = two_replicas_and_their_leader(fleet)
    channel = connections[survivor.name].channel()
    channel.queue_declare("events", durable=True, arguments=STREAM)
    channel.exchange_declare("orders", "direct")
    channel.queue_bind("events", "orders", "k")

    # Published through the survivor, fed by the leader, which dies while it feeds.
    publisher = Publisher(survivor.port)
    publisher.start()
    with httpx.Client(base_url=pulsar_stack.web_url, timeout=10) as web:
        wait_until(
            lambda: log_entries(web, fleet.namespace, "events") >= KILL_AFTER,
            timeout=120,
            what=lambda: f"{KILL_AFTER} messages in the log ({publisher.error!r})",
        )
        leader.signal(signal.SIGKILL)
        assert leader.wait_exit() == -signal.SIGKILL
        publisher.killed.set()
        wait_until(
            lambda: process_of(replicas, leader_of(fleet)) is survivor,
            timeout=REAPED_WITHIN,
            what="the survivor to lead",
        )
        publisher.join(timeout=180)
        assert not publisher.is_alive(), f"still publishing: {publisher.confirmed} confirmed"
        assert publisher.error is None, repr(publisher.error)
        published = publisher.confirmed
        assert publisher.confirmed_at_kill is not None
        assert published == publisher.confirmed_at_kill + AFTER_KILL < AT_MOST
        # Every original acknowledged: every copy stored (the feed acknowledges after).
        wait_until(
            lambda: waiting_to_be_fed(web, fleet.namespace, "events") == 0,
            timeout=120,
            what=lambda: (
                f"the feed to catch up: {waiting_to_be_fed(web, fleet.namespace, 'events')} waiting"
            ),
        )
        entries = log_entries(web, fleet.namespace, "events")
    # One exchange topic: the log holds its messages once each, in their order. Read all it
    # holds (a copy appended twice makes it longer than what was published).
    bodies = read_log(survivor.port, "events", max(entries, published))
    expected = [f"m{index}".encode() for index in range(published)]
    twice = sorted(body for body, times in Counter(bodies).items() if times > 1)
    assert not twice, f"{len(twice)} messages in the log more than once: {twice[:10]}"
    assert bodies == expected
    assert entries == published
