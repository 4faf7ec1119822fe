"""``/api/connections`` fleet-wide: any replica lists every replica's connections and closes
one wherever it is, and the client gets Connection.Close 320 ``CONNECTION_FORCED - <reason>``
as from RabbitMQ (what amqp091-go's recovery tests do: find the connection by its
``connection_name`` client property, then ``DELETE /api/connections/{name}``)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from tests.support.managed_fleet import (
    LISTED_WITHIN,
    Managed,
    ManagedFleet,
    closed_by_broker,
    connect_named,
    find_connection,
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def second(management: ManagedFleet, gateway: Managed) -> Managed:
    return management.start("replica-2", extra="amqpNodeName=rabbit@replica-2\n")


@pytest.fixture
def named() -> Iterator[str]:
    yield f"conn-{uuid.uuid4().hex[:8]}"


def test_a_connection_is_listed_with_rabbitmqs_fields_and_closed_with_the_reason(
    gateway: Managed, named: str
) -> None:
    connection = connect_named(gateway, named)
    try:
        connection.channel()
        listed = find_connection(gateway, named)
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
    connection = connect_named(gateway, named)  # held by replica-1
    try:
        listed = find_connection(second, named)  # ... seen from replica-2
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
