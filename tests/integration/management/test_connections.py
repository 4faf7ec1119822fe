"""``/api/connections`` fleet-wide: any replica lists every replica's connections and closes
one wherever it is, and the client gets Connection.Close 320 ``CONNECTION_FORCED - <reason>``
as from RabbitMQ (what amqp091-go's recovery tests do: find the connection by its
``connection_name`` client property, then ``DELETE /api/connections/{name}``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions
import pytest

from tests.integration.management.conftest import Managed, ManagedFleet

pytestmark = pytest.mark.timeout(180)

# The directory writes a replica's records at most a second after a change.
LISTED_WITHIN = 15.0


@pytest.fixture(scope="module")
def second(management: ManagedFleet, gateway: Managed) -> Managed:
    return management.start("replica-2", extra="amqpNodeName=rabbit@replica-2\n")


def connect(replica: Managed, name: str) -> pika.BlockingConnection:
    parameters = pika.ConnectionParameters("127.0.0.1", replica.port, heartbeat=0)
    parameters.client_properties = {"connection_name": name}
    return pika.BlockingConnection(parameters)


def find(replica: Managed, name: str) -> dict[str, Any]:
    """The connection whose client named itself ``name``, as ``replica`` lists it (waiting
    until it does, as amqp091-go's dropConnection retries)."""
    deadline = time.monotonic() + LISTED_WITHIN
    with replica.client() as api:
        while True:
            listed = api.get("/api/connections/").json()
            found = [c for c in listed if c["client_properties"].get("connection_name") == name]
            if found:
                return found[0]
            assert time.monotonic() < deadline, f"{name} not listed: {listed}"
            time.sleep(0.2)  # polling a listing, bounded by the deadline above


def closed_by_broker(connection: pika.BlockingConnection) -> tuple[int, str]:
    deadline = time.monotonic() + 15
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as caught:
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    return caught.value.reply_code, caught.value.reply_text


@pytest.fixture
def named() -> Iterator[str]:
    yield f"conn-{uuid.uuid4().hex[:8]}"


def test_a_connection_is_listed_with_rabbitmqs_fields_and_closed_with_the_reason(
    gateway: Managed, named: str
) -> None:
    connection = connect(gateway, named)
    try:
        connection.channel()
        listed = find(gateway, named)
        assert listed["name"] == f"127.0.0.1:{listed['peer_port']} -> 127.0.0.1:{gateway.port}"
        for key, value in {
            "user": "guest",
            "vhost": "/",
            "protocol": "AMQP 0-9-1",
            "auth_mechanism": "PLAIN",
            "peer_host": "127.0.0.1",
            "host": "127.0.0.1",
            "port": gateway.port,
            "ssl": False,
            "state": "running",
            "type": "network",
            "channels": 1,
            "user_provided_name": named,
        }.items():
            assert listed[key] == value, key
        assert listed["client_properties"]["product"] == "Pika Python Client Library"
        with gateway.client() as api:
            shown = api.get(f"/api/connections/{quote(listed['name'], safe='')}").json()
            assert shown["name"] == listed["name"]
            channels = api.get("/api/channels").json()
            assert f"{listed['name']} (1)" in [channel["name"] for channel in channels]
            response = api.delete(
                f"/api/connections/{quote(listed['name'], safe='')}",
                headers={"X-Reason": "maintenance window"},
            )
            assert response.status_code == 204
        assert closed_by_broker(connection) == (320, "CONNECTION_FORCED - maintenance window")
    finally:
        if connection.is_open:
            connection.close()


def test_any_replica_lists_and_closes_another_replicas_connection(
    gateway: Managed, second: Managed, named: str
) -> None:
    connection = connect(gateway, named)  # held by replica-1
    try:
        listed = find(second, named)  # ... seen from replica-2
        assert listed["port"] == gateway.port
        with second.client() as api:
            nodes = [node["name"] for node in api.get("/api/nodes").json()]
            assert len(nodes) == 2  # one entry per live replica
            assert "rabbit@replica-2" in nodes
            response = api.delete(f"/api/connections/{quote(listed['name'], safe='')}")
            assert response.status_code == 204
        assert closed_by_broker(connection) == (
            320,
            "CONNECTION_FORCED - Closed via management plugin",
        )
        deadline = time.monotonic() + LISTED_WITHIN
        with second.client() as api:
            while any(
                c["client_properties"].get("connection_name") == named
                for c in api.get("/api/connections").json()
            ):
                assert time.monotonic() < deadline, "the closed connection is still listed"
                time.sleep(0.2)  # polling a listing, bounded by the deadline above
    finally:
        if connection.is_open:
            connection.close()
