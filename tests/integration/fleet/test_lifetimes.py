"""Lifetimes across the fleet, with real gateway processes: exclusive queues belong to one
connection on one replica and go when it dies (kill -9), consumers are counted (and exclusive)
fleet-wide, auto-delete queues and exchanges go when their last consumer or binding anywhere
does, and the leader's cleaner survives the replica that did the unbind.

These replicas use a ZooKeeper chroot of their own (the shared stack's ZooKeeper also serves
other test runs, whose replicas would otherwise stand for leader of our namespace too) and a
short session timeout, so that a killed replica's ephemeral records go within seconds.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from typing import Any

import httpx
import pika
import pika.exceptions
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
from tests.support.fleet_clients import observe_window, wait_until

pytestmark = pytest.mark.integration

LOCKED = "405 RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{}' in vhost '/'"


@pytest.fixture
def fleet(short_session_fleet: Fleet) -> Fleet:
    """Every replica here has a short ZooKeeper session, in a chroot of this test's own."""
    return short_session_fleet


# ---------------------------------------------------------------------- helpers


def refusal(action: Callable[[], object]) -> str | None:
    """None if ``action`` worked, else the reply code and text of the Channel.Close."""
    try:
        action()
        return None
    except pika.exceptions.ChannelClosedByBroker as closed:
        return f"{closed.reply_code} {closed.reply_text}"


def declare_passive(connection: pika.BlockingConnection, queue: str) -> int | str:
    """The consumer count in a passive Declare-Ok, or the refusal."""
    channel = connection.channel()
    try:
        ok = channel.queue_declare(queue, passive=True)
    except pika.exceptions.ChannelClosedByBroker as closed:
        return f"{closed.reply_code} {closed.reply_text}"
    channel.close()
    return int(ok.method.consumer_count)


def wait_declare(
    connection: pika.BlockingConnection,
    queue: str,
    predicate: Callable[[int | str], bool],
    timeout: float = 30.0,
) -> int | str:
    """Until a passive declare of ``queue`` answers what ``predicate`` wants."""
    answers: list[int | str] = []

    def answered() -> bool:
        answers.append(declare_passive(connection, queue))
        return predicate(answers[-1])

    wait_until(
        answered, timeout=timeout, what=lambda: f"passive declare of {queue}: {answers[-1:]}"
    )
    return answers[-1]


def gone(answer: int | str) -> bool:
    return isinstance(answer, str) and answer.startswith("404")


def subscribed(web_url: str, namespace: str, binding: tuple[str, str | None], queue: str) -> bool:
    """Whether ``queue`` has its subscription on the topic of ``binding`` (exchange, key)."""
    topic = encode_local_name(*binding)
    url = f"{web_url}/admin/v2/persistent/public/{namespace}/{topic}/subscriptions"
    response = httpx.get(url, timeout=10)
    return response.status_code != 404 and subscription_for(queue) in response.json()


# ---------------------------------------------------------------------- exclusive queues


def test_an_exclusive_queue_is_locked_on_every_other_replica(fleet: Fleet) -> None:
    r1, r2 = fleet.replicas(2)
    owner = connect(r1.port)
    owner.channel().queue_declare("private", exclusive=True)
    other = connect(r2.port)
    # Known on replica 2 once a passive declare stops answering 404.
    locked = LOCKED.format("private")
    assert wait_declare(other, "private", lambda a: not gone(a)) == locked + (
        ". It could be originally declared on another connection or the exclusive property "
        "value does not match that of the original declaration."
    )
    for connection in (other, connect(r1.port)):  # another replica, another connection
        operations: dict[str, Callable[[], object]] = {
            "declare": lambda c=connection: c.channel().queue_declare("private", exclusive=True),
            "consume": lambda c=connection: c.channel().basic_consume("private", print),
            "bind": lambda c=connection: c.channel().queue_bind("private", "amq.direct", "k"),
            "purge": lambda c=connection: c.channel().queue_purge("private"),
            "delete": lambda c=connection: c.channel().queue_delete("private"),
            "get": lambda c=connection: c.channel().basic_get("private"),
        }
        for name, operation in operations.items():
            answer = refusal(operation)
            assert answer is not None and answer.startswith(locked), (name, answer)
    # The owner itself uses it.
    channel = owner.channel()
    channel.queue_bind("private", "amq.direct", "k")
    assert channel.queue_declare("private", passive=True).method.consumer_count == 0


def test_a_killed_replicas_exclusive_and_auto_delete_queues_go(
    fleet: Fleet, pulsar_stack: Any
) -> None:
    r1, r2 = fleet.replicas(2)
    on_1 = connect(r1.port)
    channel = on_1.channel()
    channel.queue_declare("private", exclusive=True)
    channel.queue_bind("private", "amq.direct", "private-key")
    channel.queue_declare("temp", auto_delete=True)
    channel.basic_consume("temp", print)  # its only consumer, on replica 1
    channel.queue_declare("durable-one", durable=True)
    on_2 = connect(r2.port)
    wait_declare(on_2, "temp", lambda answer: answer == 1)
    assert wait_declare(on_2, "private", lambda a: not gone(a)).startswith("405")  # type: ignore[union-attr]
    # A message makes the binding's subscription (lazy subscriptions, docs/fleet.md).
    channel.basic_publish("amq.direct", "private-key", b"kept until reaped")
    wait_until(
        lambda: subscribed(
            pulsar_stack.web_url, fleet.namespace, ("amq.direct", "private-key"), "private"
        ),
        timeout=30,
        what="the binding's subscription, made by its first message",
    )

    r1.signal(signal.SIGKILL)
    assert r1.wait_exit() == -signal.SIGKILL
    # Its session expires, the ephemeral owner and consumer records go, and the leader
    # (replica 2, the only one left) deletes both queues and their subscriptions.
    wait_declare(on_2, "private", gone, timeout=REAPED_WITHIN)
    wait_declare(on_2, "temp", gone, timeout=REAPED_WITHIN)
    assert declare_passive(on_2, "durable-one") == 0  # nothing else went
    wait_until(
        lambda: (
            not subscribed(
                pulsar_stack.web_url, fleet.namespace, ("amq.direct", "private-key"), "private"
            )
        ),
        timeout=30,
        what="the reaped queue's subscription to be removed",
    )
    # Free to be declared again, by a connection on another replica.
    channel = on_2.channel()
    channel.queue_declare("private", exclusive=True)
    channel.basic_publish("", "private", b"hello")
    wait_until(
        lambda: channel.basic_get("private", auto_ack=True)[2] == b"hello",
        timeout=30,
        what="the message in the re-declared queue",
    )


# ---------------------------------------------------------------------- consumers


def test_consumers_are_counted_and_exclusive_across_replicas(fleet: Fleet) -> None:
    r1, r2, r3 = fleet.replicas(3)
    on_1, on_2, on_3 = connect(r1.port), connect(r2.port), connect(r3.port)
    on_1.channel().queue_declare("work", durable=True)
    wait_declare(on_2, "work", lambda a: a == 0)
    first = on_1.channel()
    first_tag = first.basic_consume("work", print)
    second = on_2.channel()
    second_tag = second.basic_consume("work", print)
    assert wait_declare(on_3, "work", lambda a: a == 2) == 2  # replica 3 has none of its own

    in_use = "403 ACCESS_REFUSED - queue 'work' in vhost '/' in exclusive use"
    assert refusal(lambda: on_3.channel().basic_consume("work", print, exclusive=True)) == in_use
    assert refusal(lambda: on_3.channel().queue_delete("work", if_unused=True)) == (
        "406 PRECONDITION_FAILED - queue 'work' in vhost '/' in use"
    )
    first.basic_cancel(first_tag)
    second.basic_cancel(second_tag)
    wait_declare(on_3, "work", lambda a: a == 0)

    holder = on_2.channel()
    holder.basic_consume("work", print, exclusive=True)
    wait_declare(on_1, "work", lambda a: a == 1)
    for connection in (on_1, on_3):
        assert refusal(lambda c=connection: c.channel().basic_consume("work", print)) == in_use
    on_2.close()  # the exclusive consumer goes with its connection
    wait_declare(on_1, "work", lambda a: a == 0)
    on_1.channel().basic_consume("work", print, exclusive=True)


def test_an_auto_delete_queue_lives_while_any_replica_consumes_it(fleet: Fleet) -> None:
    r1, r2 = fleet.replicas(2)
    on_1, on_2 = connect(r1.port), connect(r2.port)
    on_1.channel().queue_declare("temp", auto_delete=True)
    wait_declare(on_2, "temp", lambda a: a == 0)
    channel_1, channel_2 = on_1.channel(), on_2.channel()
    tag_1 = channel_1.basic_consume("temp", print)
    tag_2 = channel_2.basic_consume("temp", print)
    wait_declare(on_1, "temp", lambda a: a == 2)

    channel_1.basic_cancel(tag_1)
    wait_declare(on_2, "temp", lambda a: a == 1)
    # Replica 1's last consumer went, but replica 2 still consumes: nothing may delete the
    # queue (neither replica 1 nor the leader); give them time to get it wrong.
    observe_window(3.0)
    assert declare_passive(on_1, "temp") == 1
    assert declare_passive(on_2, "temp") == 1

    channel_2.basic_cancel(tag_2)
    wait_declare(on_1, "temp", gone)
    wait_declare(on_2, "temp", gone)


def test_an_auto_delete_exchange_goes_with_its_last_binding_on_any_replica(fleet: Fleet) -> None:
    r1, r2 = fleet.replicas(2)
    on_1, on_2 = connect(r1.port), connect(r2.port)
    channel = on_1.channel()
    channel.exchange_declare("fleeting", "direct", auto_delete=True)
    channel.queue_declare("q1")
    channel.queue_declare("q2")
    channel.queue_bind("q1", "fleeting", "k")
    wait_declare(on_2, "q2", lambda a: a == 0)
    wait_until(
        lambda: refusal(lambda: on_2.channel().exchange_declare("fleeting", passive=True)) is None,
        timeout=30,
        what="replica 2 to know the exchange",
    )
    on_2.channel().queue_bind("q2", "fleeting", "k")

    on_1.channel().queue_unbind("q1", "fleeting", "k")  # replica 1 may not know q2's binding yet
    assert refusal(lambda: on_2.channel().exchange_declare("fleeting", passive=True)) is None
    on_2.channel().queue_unbind("q2", "fleeting", "k")
    wait_until(
        lambda: (
            refusal(lambda: on_1.channel().exchange_declare("fleeting", passive=True)) or ""
        ).startswith("404"),
        timeout=30,
        what="the auto-delete exchange to go",
    )


# ---------------------------------------------------------------------- the leader


def test_leadership_moves_when_the_leader_dies_and_the_new_leader_cleans(
    fleet: Fleet, pulsar_stack: Any
) -> None:
    replicas, connections, leader, survivor = two_replicas_and_their_leader(fleet)
    assert any(
        re.search(rf"now leads namespace public/{fleet.namespace}", line)
        for line in leader.output()
    )

    # The unbind is done on the leader, which then dies before the subscription drained.
    channel = connections[leader.name].channel()
    channel.confirm_delivery()
    channel.exchange_declare("ex", "direct")
    channel.queue_declare("q", durable=True)
    channel.queue_bind("q", "ex", "k")
    for index in range(3):
        channel.basic_publish("ex", "k", f"before-{index}".encode())
    channel.queue_unbind("q", "ex", "k")
    channel.basic_publish("ex", "k", b"after the unbind")
    assert subscribed(pulsar_stack.web_url, fleet.namespace, ("ex", "k"), "q")

    leader.signal(signal.SIGKILL)
    assert leader.wait_exit() == -signal.SIGKILL
    wait_until(
        lambda: process_of(replicas, leader_of(fleet)) is survivor,
        timeout=REAPED_WITHIN,
        what="the survivor to lead",
    )
    survivor.wait_for(rf"now leads namespace public/{fleet.namespace}", timeout=10)

    # The drain record is in ZooKeeper: the survivor delivers what was routed before the
    # unbind, and not what came after.
    on_survivor = connections[survivor.name].channel()
    received: list[bytes] = []

    def drained() -> bool:
        body = on_survivor.basic_get("q", auto_ack=True)[2]
        if body is not None:
            received.append(body)
        return len(received) >= 3

    wait_until(drained, timeout=30, what=lambda: f"the drained messages, got {received}")
    assert sorted(received) == [b"before-0", b"before-1", b"before-2"]
    # ... and its cleaner removes the drained subscription.
    wait_until(
        lambda: not subscribed(pulsar_stack.web_url, fleet.namespace, ("ex", "k"), "q"),
        timeout=60,
        what="the new leader's cleaner to remove the drained subscription",
    )
    assert on_survivor.basic_get("q", auto_ack=True)[2] is None
