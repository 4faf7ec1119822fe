"""This replica's AMQP connections as the management API shows them (``/api/connections``,
``/api/channels``), and closing one on request.

The JSON is RabbitMQ's (``rabbit_mgmt_format`` of a network connection): ``name`` is RabbitMQ's
``"<peer host>:<peer port> -> <host>:<port>"``, which clients' test suites look connections up
by (amqp091-go matches ``client_properties.connection_name``, then closes by ``name``).
Byte and message counters per connection are not kept by the gateway and are left out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.model.json_values import table_json
from gateway.server.connection import ClientConnection
from gateway.server.server import GatewayServer

log = logging.getLogger("gateway.connection")

__all__ = ["LocalConnections", "connection_name", "split_address"]

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
