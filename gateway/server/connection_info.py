"""This replica's AMQP connections as the management API shows them (``/api/connections``,
``/api/channels``, ``/api/consumers``), and closing one on request.

The JSON is RabbitMQ's (``rabbit_mgmt_format`` of a network connection): ``name`` is RabbitMQ's
``"<peer host>:<peer port> -> <host>:<port>"``, which clients' test suites look connections up
by (amqp091-go matches ``client_properties.connection_name``, then closes by ``name``).
Byte and message counters per connection are not kept by the gateway and are left out.

A connection's consumers are described apart from it (``consumers``): what each consumer is,
in the compact form its fleet-wide record keeps (metadata/connections.py), and once per
connection what their ``channel_details`` need of it; ``management/connections.py`` makes
RabbitMQ's JSON of both.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.backend.interface import activity_status
from gateway.metadata.connections import ConsumerGroup
from gateway.model.json_values import table_json
from gateway.server.channel_state import Consumer
from gateway.server.connection import ClientConnection
from gateway.server.server import GatewayServer

log = logging.getLogger("gateway.connection")

__all__ = ["LocalConnections", "connection_name", "consumer_info", "split_address"]

PROTOCOL = "AMQP 0-9-1"
#: RabbitMQ's reason when DELETE /api/connections/{name} has no X-Reason header.
DEFAULT_CLOSE_REASON = "Closed via management plugin"


def split_address(address: str) -> tuple[str, int | None]:
    """``host:port`` (IPv6 hosts unbracketed, as the listeners record them) → (host, port)."""
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit():
        return address, None
    return host, int(port)


def connection_name(peer: str, local: tuple[str, int] | None) -> str:
    peer_host, peer_port = split_address(peer)
    left = f"{peer_host}:{peer_port}" if peer_port is not None else peer_host
    right = f"{local[0]}:{local[1]}" if local is not None else "unix"
    return f"{left} -> {right}"


def consumer_info(channel: int, consumer: Consumer) -> dict[str, Any]:
    """One consumer as its record keeps it: RabbitMQ's ``/api/consumers`` fields but
    ``channel_details`` (its connection's, once per connection) and the queue's vhost (the
    connection's)."""
    status = activity_status(consumer.subscription)
    return {
        "consumer_tag": consumer.tag,
        "queue": consumer.queue,
        "channel": channel,
        "ack_required": not consumer.no_ack,
        "prefetch_count": consumer.prefetch,
        "exclusive": consumer.exclusive,
        "active": status != "waiting",
        "activity_status": status,
        "arguments": table_json(consumer.arguments),
    }


class LocalConnections:
    """The connections of one ``GatewayServer``; ``node`` is this replica's node name."""

    def __init__(self, server: GatewayServer, node: str) -> None:
        self._server = server
        self.node = node

    def records(self) -> dict[str, Mapping[str, Any]]:
        """Connection id -> its JSON, for the connections past Connection.Open."""
        found: dict[str, Mapping[str, Any]] = {}
        for connection in self._server.connections:
            if not connection.opened or connection.protocol.is_closed:
                continue
            found[connection.id] = self._info(connection)
        return found

    def consumers(self) -> dict[str, ConsumerGroup]:
        """Connection id -> its consumers, for the connections past Connection.Open that
        have any."""
        found: dict[str, ConsumerGroup] = {}
        for connection in self._server.connections:
            if not connection.opened or connection.protocol.is_closed:
                continue
            described = [consumer_info(n, consumer) for n, consumer in connection.consumers()]
            if described:
                found[connection.id] = ConsumerGroup(self._about(connection), described)
        return found

    def _about(self, connection: ClientConnection) -> dict[str, Any]:
        """What a consumer's ``channel_details`` (and its queue's vhost) take from its
        connection."""
        peer_host, peer_port = split_address(connection.peer.address)
        return {
            "name": connection_name(connection.peer.address, connection.local_address),
            "node": self.node,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "user": connection.user or "",
            "vhost": connection.vhost or "/",
        }

    def _info(self, connection: ClientConnection) -> dict[str, Any]:
        protocol = connection.protocol
        peer_host, peer_port = split_address(connection.peer.address)
        local = connection.local_address
        negotiated = protocol.negotiated
        properties = table_json(protocol.client_properties)
        return {
            "name": connection_name(connection.peer.address, local),
            "node": self.node,
            "type": "network",
            "state": "running",
            "protocol": PROTOCOL,
            "user": connection.user or "",
            "user_who_performed_action": connection.user or "",
            "vhost": connection.vhost or "/",
            "auth_mechanism": connection.mechanism,
            "host": local[0] if local is not None else "",
            "port": local[1] if local is not None else 0,
            "peer_host": peer_host,
            "peer_port": peer_port,
            "ssl": connection.tls,
            "peer_cert_subject": (
                f"CN={connection.peer.tls_common_name}" if connection.peer.tls_common_name else None
            ),
            "peer_cert_issuer": None,
            "peer_cert_validity": None,
            "channels": len(protocol.open_channels),
            "channel_max": negotiated.channel_max,
            "frame_max": negotiated.frame_max,
            "timeout": negotiated.heartbeat,
            "connected_at": connection.connected_at_ms,
            "client_properties": properties,
            "user_provided_name": properties.get("connection_name"),
            # Which replica holds it, for the close and for people (not in RabbitMQ's JSON).
            "connection_id": connection.id,
            # For /api/channels; keys starting with "_" are not shown.
            "_channel_numbers": sorted(protocol.open_channels),
        }

    async def close(self, connection_id: str, reason: str) -> bool:
        """Connection.Close 320 CONNECTION_FORCED with ``reason`` (as RabbitMQ's
        ``rabbit_networking:close_connection``); False when there is no such connection."""
        for connection in self._server.connections:
            if connection.id == connection_id and not connection.protocol.is_closed:
                log.info("connection %s: closing on request: %s", connection.peer.address, reason)
                await connection.request_close(
                    AMQPError(ReplyCode.CONNECTION_FORCED, reason or DEFAULT_CLOSE_REASON)
                )
                return True
        return False
