"""Sans-IO AMQP 0-9-1 protocol core: framing, codec, connection and channel state machines.

No sockets, no clocks, no trio: bytes and the current time go in, events and bytes come out.
See docs/protocol.md for the API, the events, and every deviation from RabbitMQ.
"""

from gateway.amqp.connection import (
    ConnectionSettings,
    ConnectionState,
    HeaderLike,
    Negotiated,
    ServerConnection,
)
from gateway.amqp.errors import (
    AMQPError,
    ChannelError,
    ConnectionException,
    FrameError,
    ReplyCode,
    amqp_error,
)
from gateway.amqp.properties import MessageProperties

__all__ = [
    "AMQPError",
    "ChannelError",
    "ConnectionException",
    "ConnectionSettings",
    "ConnectionState",
    "FrameError",
    "HeaderLike",
    "MessageProperties",
    "Negotiated",
    "ReplyCode",
    "ServerConnection",
    "amqp_error",
]
