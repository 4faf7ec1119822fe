"""``/api/consumers`` fleet-wide: one entry per consumer of every replica, with RabbitMQ's
fields (consumer_tag, queue, channel_details, ack_required, prefetch_count, exclusive,
active, activity_status, arguments), while pika clients consume; gone once cancelled."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pytest

from tests.support.managed_fleet import Managed, ManagedFleet

pytestmark = pytest.mark.timeout(240)

# A replica writes its consumers' records at most a second after a change.
LISTED_WITHIN = 15.0

#: The keys of a consumer in RabbitMQ 3.10-3.13's /api/consumers (read from a live node).
CONSUMER_KEYS = {
    "arguments",
    "ack_required",
    "active",
    "activity_status",
    "channel_details",
    "consumer_tag",
    "exclusive",
    "prefetch_count",
    "queue",
}
CHANNEL_KEYS = {"connection_name", "name", "node", "number", "peer_host", "peer_port", "user"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def second(management: ManagedFleet, gateway: Managed) -> Managed:
    return management.start("replica-2", extra="amqpNodeName=rabbit@replica-2\n")


@pytest.fixture
def named() -> str:
    return unique("consumers")


@pytest.fixture
def client(gateway: Managed, named: str) -> Iterator[pika.BlockingConnection]:
    """A pika connection to replica-1, named ``named`` (its ``connection_name``)."""
    parameters = pika.ConnectionParameters("127.0.0.1", gateway.port, heartbeat=0)
    parameters.client_properties = {"connection_name": named}
    connection = pika.BlockingConnection(parameters)
    yield connection
    if connection.is_open:
        connection.close()


def consumers_until(
    replica: Managed, check: Callable[[list[dict[str, Any]]], bool], path: str = "/api/consumers"
) -> list[dict[str, Any]]:
    """``path``'s answer once ``check`` holds for it (records are a second behind)."""
    deadline = time.monotonic() + LISTED_WITHIN
    with replica.client() as api:
        while True:
            response = api.get(path)
            assert response.status_code == 200, response.text
            listed: list[dict[str, Any]] = response.json()
            if check(listed):
                return listed
            assert time.monotonic() < deadline, f"{path} answered {listed}"
            time.sleep(0.2)  # polling a listing, bounded by the deadline above


def of_queues(listed: list[dict[str, Any]], *queues: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {queue: [] for queue in queues}
    for consumer in listed:
        if consumer["queue"]["name"] in found:
            found[consumer["queue"]["name"]].append(consumer)
    return found


def test_consumers_of_another_replica_are_listed_with_rabbitmqs_fields(
    gateway: Managed, second: Managed, client: pika.BlockingConnection, named: str
) -> None:
    work, solo = unique("work"), unique("solo")
    tag, solo_tag = unique("worker"), unique("solo")
    channel = client.channel()  # channel 1
    channel.queue_declare(work, durable=True)
    channel.queue_declare(solo)
    channel.basic_qos(prefetch_count=3)
    channel.basic_consume(work, lambda *_: None, consumer_tag=tag, arguments={"x-priority": 5})
    other = client.channel()  # channel 2
    other.basic_consume(solo, lambda *_: None, auto_ack=True, exclusive=True, consumer_tag=solo_tag)

    # Held by replica-1, listed by replica-2 (from replica-1's records).
    listed = consumers_until(second, lambda found: all(of_queues(found, work, solo).values()))
    by_queue = of_queues(listed, work, solo)
    assert [len(found) for found in by_queue.values()] == [1, 1]
    worker, exclusive = by_queue[work][0], by_queue[solo][0]
    assert set(worker) == CONSUMER_KEYS and set(worker["channel_details"]) == CHANNEL_KEYS
    with gateway.client() as api:
        connection = next(
            c for c in api.get("/api/connections").json() if c["user_provided_name"] == named
        )
    assert worker == {
        "arguments": {"x-priority": 5},
        "ack_required": True,
        "active": True,
        "activity_status": "up",
        "channel_details": {
            "connection_name": connection["name"],
            "name": f"{connection['name']} (1)",
            "node": connection["node"],
            "number": 1,
            "peer_host": "127.0.0.1",
            "peer_port": connection["peer_port"],
            "user": "guest",
        },
        "consumer_tag": tag,
        "exclusive": False,
        "prefetch_count": 3,
        "queue": {"name": work, "vhost": "/"},
    }
    assert (
        exclusive["consumer_tag"],
        exclusive["ack_required"],
        exclusive["exclusive"],
        exclusive["prefetch_count"],
        exclusive["arguments"],
        exclusive["channel_details"]["number"],
    ) == (solo_tag, False, True, 0, {}, 2)
    # The vhost's own list, and the holder's own listing (from memory), say the same.
    assert of_queues(consumers_until(gateway, lambda _: True), work, solo) == by_queue
    in_vhost = consumers_until(second, lambda _: True, "/api/consumers/%2F")
    assert of_queues(in_vhost, work, solo) == by_queue
    with second.client() as api:
        missing = api.get("/api/consumers/no-such-vhost")
        assert (missing.status_code, missing.json()) == (
            404,
            {"error": "Object Not Found", "reason": "Not Found"},
        )

    channel.basic_cancel(tag)
    gone = consumers_until(second, lambda found: not of_queues(found, work)[work])
    assert [c["consumer_tag"] for c in of_queues(gone, solo)[solo]] == [solo_tag]
    client.close()
    consumers_until(second, lambda found: not any(of_queues(found, work, solo).values()))


def test_a_single_active_consumer_queues_line_shows_who_is_active(
    gateway: Managed, second: Managed, client: pika.BlockingConnection
) -> None:
    queue = unique("line")
    channel = client.channel()
    channel.queue_declare(queue, durable=True, arguments={"x-single-active-consumer": True})
    channel.basic_consume(queue, lambda *_: None, consumer_tag="first")
    client.process_data_events(time_limit=0.5)  # the first one takes the line's front
    channel.basic_consume(queue, lambda *_: None, consumer_tag="second")

    def both(found: list[dict[str, Any]]) -> bool:
        return len(of_queues(found, queue)[queue]) == 2

    listed = {c["consumer_tag"]: c for c in of_queues(consumers_until(second, both), queue)[queue]}
    assert (listed["first"]["active"], listed["first"]["activity_status"]) == (
        True,
        "single_active",
    )
    assert (listed["second"]["active"], listed["second"]["activity_status"]) == (
        False,
        "waiting",
    )
    channel.basic_cancel("first")

    def handed_over(found: list[dict[str, Any]]) -> bool:
        line = of_queues(found, queue)[queue]
        return [(c["consumer_tag"], c["activity_status"]) for c in line] == [
            ("second", "single_active")
        ]

    consumers_until(second, handed_over)


def test_a_queue_shows_its_consumers_and_what_they_hold(
    gateway: Managed, second: Managed, client: pika.BlockingConnection
) -> None:
    """GET /api/queues/{vhost}/{name}: ``consumer_details`` (the queue's /api/consumers
    entries), ``exclusive_consumer_tag``, and no more unacknowledged messages than the
    consumers' prefetch lets them hold (what the replica read ahead for them is ready, as
    on RabbitMQ)."""
    queue = unique("held")
    channel = client.channel()
    channel.confirm_delivery()
    channel.queue_declare(queue, durable=True)
    for index in range(10):
        channel.basic_publish("", queue, f"m{index}".encode())
    held: list[int] = []
    channel.basic_qos(prefetch_count=3)
    channel.basic_consume(
        queue,
        lambda _c, method, _p, _b: held.append(method.delivery_tag),
        exclusive=True,
        consumer_tag="holder",
    )
    deadline = time.monotonic() + LISTED_WITHIN * 2
    with second.client() as api:
        while True:
            client.process_data_events(time_limit=0.1)
            shown = api.get(f"/api/queues/%2F/{queue}").json()
            counts = (shown["messages"], shown["messages_unacknowledged"], shown["messages_ready"])
            if counts == (10, 3, 7) and shown["consumer_details"]:
                break
            assert time.monotonic() < deadline, f"{counts}, {shown['consumer_details']}"
            time.sleep(0.2)  # polling Pulsar's statistics and the records, bounded above
        assert len(held) == 3
        assert shown["consumers"] == 1 and shown["exclusive_consumer_tag"] == "holder"
        listed = of_queues(api.get("/api/consumers").json(), queue)[queue]
        assert shown["consumer_details"] == listed
        assert listed[0]["prefetch_count"] == 3
        (in_list,) = [q for q in api.get("/api/queues/%2F").json() if q["name"] == queue]
        assert (in_list["messages_unacknowledged"], in_list["exclusive_consumer_tag"]) == (
            3,
            "holder",
        )
