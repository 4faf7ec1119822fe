"""What a ``ServerConnection`` is configured with, the states it goes through, and what it
negotiated (§4.2.2, Connection.Tune)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, NamedTuple

import gateway
from gateway.amqp.framing import FRAME_MIN_SIZE

#: The highest channel number AMQP's short allows; channel-max 0 means this (§4.2.2 Tune).
CHANNEL_MAX_LIMIT: Final = 65535


@dataclass(frozen=True)
class ConnectionSettings:
    """Per-connection limits and identity (names in comments: reference/002 config keys)."""

    # amqpSessionCountLimit: highest channel number (0 = 65535), offered in Connection.Tune.
    channel_max: int = 256
    # amqpNetworkBufferSize: largest frame, offered in Connection.Tune.
    frame_max: int = 2_097_152
    # amqpHeartbeatDelay: seconds, offered in Connection.Tune (0 = off unless the client asks).
    heartbeat: int = 0
    # amqpHeartbeatTimeoutFactor: missed intervals before the peer is declared dead.
    heartbeat_timeout_factor: int = 2
    # amqpMaxMessageSize: larger messages are refused with 406 PRECONDITION_FAILED (RabbitMQ's).
    max_message_size: int = 104_857_600
    mechanisms: tuple[str, ...] = ("PLAIN",)
    locales: tuple[str, ...] = ("en_US",)
    # amqpServerProduct: "RabbitMQ", what RabbitMQ's clients and their test suites look for
    # (capabilities.py; docs/compatibility.md, "Product and version").
    product: str = "RabbitMQ"
    # amqpServerVersion: the RabbitMQ version clients compare against (they gate features on it).
    version: str = "3.13.7"
    gateway_version: str = gateway.__version__
    platform: str = ""  # "" = "Python <version>"
    copyright: str = "Copyright (c) the Starlight for RabbitMQ authors"
    information: str = "Licensed under the Apache License 2.0"
    cluster_name: str = ""
    # gatewayCompiledHotPath: hand each read to the compiled frame scan first, when built
    # (gateway/amqp/compiled.py); False: every frame takes the Python path.
    compiled: bool = True
    # Not part of the hash: a dict is unhashable, and settings objects are hashed by callers.
    extra_server_properties: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not FRAME_MIN_SIZE <= self.frame_max <= 0xFFFFFFFF:
            raise ValueError(f"frame_max must be at least {FRAME_MIN_SIZE} octets")
        if not 0 <= self.channel_max <= CHANNEL_MAX_LIMIT:
            raise ValueError("channel_max must be between 0 and 65535")
        if not 0 <= self.heartbeat <= 65535:
            raise ValueError("heartbeat must be between 0 and 65535 seconds")
        if self.heartbeat_timeout_factor < 1:
            raise ValueError("heartbeat_timeout_factor must be at least 1")
        if self.max_message_size < 0:
            raise ValueError("max_message_size must not be negative")
        if not self.mechanisms:
            raise ValueError("at least one SASL mechanism is needed")


class ConnectionState(Enum):
    AWAITING_HEADER = "awaiting_header"
    STARTING = "starting"  # Start sent, waiting for Start-Ok
    AUTHENTICATING = "authenticating"  # LoginRequested out, waiting for accept/refuse_login
    TUNING = "tuning"  # Tune sent, waiting for Tune-Ok
    OPENING = "opening"  # waiting for Connection.Open
    VHOST_CHECK = "vhost_check"  # VhostRequested out, waiting for accept/refuse_vhost
    OPEN = "open"
    CLOSING = "closing"  # our Connection.Close sent, waiting for Close-Ok
    CLOSED = "closed"


class Negotiated(NamedTuple):
    channel_max: int
    frame_max: int
    heartbeat: int
