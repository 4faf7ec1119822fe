"""What the protocol core tells the shell: one frozen dataclass per kind of event.

``ServerConnection.receive_data``/``handle_timer``/``take_events`` return lists of these, in
the order the client's frames arrived. Replies the core can give on its own (Open-Ok,
Close-Ok, Flow-Ok, heartbeats, protocol errors) are already queued when an event is returned;
the events that need a decision from outside say so in their docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

from gateway.amqp.commands import Command
from gateway.amqp.errors import AMQPError
from gateway.amqp.properties import MessageProperties, decode_properties

__all__ = [
    "AckReceived",
    "Cause",
    "ChannelClosed",
    "ChannelErrored",
    "ChannelOpened",
    "CommandReceived",
    "ConnectionClosed",
    "ConnectionErrored",
    "ConnectionOpened",
    "ConnectionTerminated",
    "Event",
    "HeartbeatTimedOut",
    "LoginRequested",
    "NackReceived",
    "PublishReceived",
    "RejectReceived",
    "UpdateSecretRequested",
    "VhostRequested",
]


@dataclass(frozen=True, slots=True)
class LoginRequested:
    """Connection.Start-Ok arrived. Answer with ``accept_login(user)`` or ``refuse_login(text)``.

    ``response`` is the raw SASL response (``sasl.parse_plain``/``parse_amqplain`` decode it).
    Frames the client sends meanwhile are held until the answer.
    """

    mechanism: str
    response: bytes
    client_properties: dict[str, Any]
    locale: str = "en_US"


@dataclass(frozen=True, slots=True)
class VhostRequested:
    """Connection.Open arrived. Answer with ``accept_vhost()`` or ``refuse_vhost(code, text)``."""

    vhost: str


@dataclass(frozen=True, slots=True)
class ConnectionOpened:
    """Open-Ok was queued: the connection is usable."""

    vhost: str
    user: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    """Channel.Open arrived and Open-Ok was queued."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """The channel is gone; free its resources.

    ``by_client=True``: the client sent Channel.Close (the reply code and text are the
    client's); answer it with ``accept_channel_close`` once the channel's work is dropped and
    its unacknowledged messages are back in their queues (RabbitMQ's order: a client that has
    Close-Ok finds them there). ``by_client=False``: a Channel.Close we sent
    (``close_channel`` or a soft error found by the core) has been acknowledged (our code and
    text).
    """

    channel: int
    reply_code: int
    reply_text: str
    by_client: bool


@dataclass(frozen=True, slots=True)
class ChannelErrored:
    """The core found a soft error on the channel and queued Channel.Close.

    Drop the channel's work now; ``ChannelClosed(by_client=False)`` follows on Close-Ok.
    """

    channel: int
    error: AMQPError


@dataclass(frozen=True, slots=True)
class CommandReceived:
    """A command for the shell to act on: exchange.*, queue.*, basic.* (except publish and
    the acks, which have their own events) and confirm.select, typed (``commands.py``).

    Answer with ``send_reply(channel, command, reply)``; refuse with ``refuse(channel, error,
    command)``. A method the gateway did not implement would never get here: the core
    refuses such methods with 540 NOT_IMPLEMENTED.
    """

    channel: int
    command: Command


@dataclass(frozen=True)
class PublishReceived:
    """A whole published message: Basic.Publish, its content header and every body frame.

    ``header`` is the content header's raw *property flags + property list* (the 12 octets of
    class/weight/body size are dropped: they are rebuilt on delivery). It has been checked to
    be well formed, so ``properties`` (decoded on first access, then cached) cannot fail. Pass
    ``header`` unchanged to ``send_deliver``/``send_get_ok``/``send_return``.
    """

    METHOD: ClassVar[tuple[int, int]] = (60, 40)  # Basic.Publish, named when refused
    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    header: bytes
    body: bytes = field(repr=False)

    @cached_property
    def properties(self) -> MessageProperties:
        return decode_properties(self.header)


@dataclass(frozen=True, slots=True)
class AckReceived:
    """Basic.Ack from a consumer."""

    channel: int
    delivery_tag: int
    multiple: bool


@dataclass(frozen=True, slots=True)
class NackReceived:
    channel: int
    delivery_tag: int
    multiple: bool
    requeue: bool


@dataclass(frozen=True, slots=True)
class RejectReceived:
    channel: int
    delivery_tag: int
    requeue: bool


@dataclass(frozen=True, slots=True)
class UpdateSecretRequested:
    """Connection.Update-Secret (e.g. a refreshed JWT). Answer with ``accept_update_secret()``
    or ``close_connection`` (RabbitMQ: 530 NOT_ALLOWED)."""

    new_secret: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class ConnectionErrored:
    """The core found a hard error and queued Connection.Close. Stop all work on the
    connection; ``ConnectionClosed(by_client=False)`` follows on Close-Ok (or
    ``ConnectionTerminated`` when the stream could not be read any further)."""

    error: AMQPError


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The close handshake is complete: stop all work on the connection.

    ``by_client=True``: the client sent Connection.Close. ``by_client=False``: the client
    acknowledged our Connection.Close, or sent its own Close as ours crossed it. After a
    Close of the client's (either case), answer it with ``accept_connection_close`` once the
    channels are closed and their unacknowledged messages are back in their queues
    (RabbitMQ's order), flush ``data_to_send()`` and let the client close the socket
    (``peer_closes_socket``); otherwise close the socket.
    """

    reply_code: int
    reply_text: str
    by_client: bool


@dataclass(frozen=True, slots=True)
class ConnectionTerminated:
    """The connection ends without a close handshake: flush ``data_to_send()`` (it may hold
    our protocol header or a Connection.Close) and close the socket.

    Reasons: a wrong protocol header, the client's EOF, a refused login when the client did
    not advertise ``authentication_failure_close``, or a framing error (after which nothing
    the client sends can be read).
    """

    reason: str


@dataclass(frozen=True, slots=True)
class HeartbeatTimedOut:
    """Nothing arrived for ``heartbeat * heartbeat_timeout_factor`` seconds: close the socket
    (no Connection.Close: RabbitMQ does the same, the peer is presumed dead)."""


Cause = Command | PublishReceived
"""What a refusal names in its Channel.Close or Connection.Close (``ServerConnection.refuse``)."""

Event = (
    LoginRequested
    | VhostRequested
    | ConnectionOpened
    | ChannelOpened
    | ChannelClosed
    | ChannelErrored
    | CommandReceived
    | PublishReceived
    | AckReceived
    | NackReceived
    | RejectReceived
    | UpdateSecretRequested
    | ConnectionErrored
    | ConnectionClosed
    | ConnectionTerminated
    | HeartbeatTimedOut
)
