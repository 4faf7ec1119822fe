"""``ServerConnection``: the sans-IO AMQP 0-9-1 server state machine.

Bytes from the socket go in through ``receive_data``; events come out; the bytes to write are
drained with ``data_to_send``. Time is passed in (``now``, any monotonic clock in seconds):
the core never reads a clock, never sleeps and never does I/O, so every path is testable by
feeding bytes — whole, one byte at a time, or split anywhere.

Connection life (§4.2.2 and RabbitMQ's ``rabbit_reader``)::

    AWAITING_HEADER --header--> STARTING --Start-Ok--> AUTHENTICATING --accept_login-->
    TUNING --Tune-Ok--> OPENING --Open--> VHOST_CHECK --accept_vhost--> OPEN
    any --our Close--> CLOSING --Close-Ok--> CLOSED;  any --client Close--> CLOSED

Decisions that may need I/O (credentials, vhost permissions) are events answered by calling
``accept_*``/``refuse_*``; frames that arrive meanwhile are held, then processed when the
answer comes, and the events they produce are returned by the next ``receive_data``,
``handle_timer`` or ``take_events`` call.

Errors in what the peer sent never raise out of ``receive_data``: a soft error queues
Channel.Close (``ChannelErrored``), a hard one queues Connection.Close (``ConnectionErrored``),
after which only Close-Ok — or the peer's own Close, answered with Close-Ok — is looked at.

The handshake and channel 0 are in ``handshake.py`` (a mixin of ``ServerConnection``); the
settings, states and negotiated values in ``connection_settings.py`` (re-exported here).
"""

from __future__ import annotations

import struct
from typing import Any

from pamqp import base, commands

from gateway.amqp import events as ev
from gateway.amqp.channel import Channel, ChannelState
from gateway.amqp.codec import (
    CLIENT_METHODS,
    SPECS,
    decode_method,
    encode_method,
    method_name,
)
from gateway.amqp.commands import Command, Reply, command_from, encode_reply
from gateway.amqp.compiled import frame_scan
from gateway.amqp.connection_settings import (
    CHANNEL_MAX_LIMIT,
    ConnectionSettings,
    ConnectionState,
    Negotiated,
)
from gateway.amqp.errors import (
    AMQPError,
    ChannelError,
    ConnectionException,
    FrameError,
    ReplyCode,
)
from gateway.amqp.fastpath import (
    ACK,
    NACK,
    PUBLISH,
    REJECT,
    decode_ack,
    decode_nack,
    decode_publish,
    decode_reject,
    encode_ack,
    encode_deliver,
    encode_get_ok,
    encode_nack,
    encode_return,
)
from gateway.amqp.framing import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    HEARTBEAT_FRAME,
    INITIAL_FRAME_MAX,
    FrameReader,
    method_frame,
)
from gateway.amqp.handshake import ConnectionHandshake
from gateway.amqp.properties import MessageProperties, encode_properties

__all__ = [
    "ConnectionSettings",
    "ConnectionState",
    "HeaderLike",
    "Negotiated",
    "ServerConnection",
]

HeaderLike = bytes | MessageProperties | commands.Basic.Properties
"""What ``send_deliver`` & co. accept as message properties: the raw flags + property list
(``PublishReceived.header``, replayed unchanged), or an object to encode."""

_INDEX = struct.Struct(">I")
_CHANNEL_OPEN = 0x0014000A
_CHANNEL_CLOSE = 0x00140028
_CHANNEL_CLOSE_OK = 0x00140029
# Payloads we send often enough to keep ready. Channel.Open-Ok's channel-id is an empty
# longstr, as RabbitMQ sends it (pamqp defaults to "0").
_CHANNEL_OPEN_OK = _INDEX.pack(0x0014000B) + b"\x00\x00\x00\x00"
_CHANNEL_CLOSE_OK_PAYLOAD = _INDEX.pack(_CHANNEL_CLOSE_OK)


# Module-level aliases: an Enum attribute lookup costs ~0.1 µs, and the hot paths make several.
_OPEN = ConnectionState.OPEN
_CLOSING = ConnectionState.CLOSING
_CLOSED = ConnectionState.CLOSED
_CHANNEL_OPEN_STATE = ChannelState.OPEN
_CHANNEL_CLOSING_STATE = ChannelState.CLOSING
_CHANNEL_CLOSE_RECEIVED_STATE = ChannelState.CLOSE_RECEIVED

_HEARTBEAT_STATES = frozenset(
    {
        ConnectionState.OPENING,
        ConnectionState.VHOST_CHECK,
        ConnectionState.OPEN,
        ConnectionState.CLOSING,
    }
)


class ServerConnection(ConnectionHandshake):
    def __init__(self, settings: ConnectionSettings, now: float) -> None:
        self.settings = settings
        self._state = ConnectionState.AWAITING_HEADER
        self._reader = FrameReader(min(INITIAL_FRAME_MAX, settings.frame_max))
        self._header = bytearray()
        self._out: list[bytes] = []
        self._pending: list[ev.Event] = []
        self._held = False
        self._channels: dict[int, Channel] = {}
        # The compiled scan of a read's publishes and acks, if built (gateway/amqp/compiled.py).
        self._scan = frame_scan() if settings.compiled else None
        self._channel_max = settings.channel_max or CHANNEL_MAX_LIMIT
        self._frame_max = settings.frame_max
        self._heartbeat = 0
        # The latest time we were told; output queued between calls is stamped with it, which
        # can only make a heartbeat come early (harmless), never late.
        self._now = now
        self._last_recv = now
        self._last_send = now
        self._close_code = 0
        self._close_text = ""
        self._user = ""
        self._vhost = ""
        self.client_properties: dict[str, Any] = {}
        self.client_capabilities: dict[str, Any] = {}
        # The client sent Connection.Close and our Close-Ok waits for accept_connection_close.
        self._close_ok_owed = False
        # True once we answered the client's Connection.Close with Close-Ok: the client closes
        # the socket next (connection.close-ok), and until it does whatever it still sends is
        # to be read and discarded, as RabbitMQ's rabbit_reader does in its `closed` state.
        self.peer_closes_socket = False

    # ------------------------------------------------------------------------------ state

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def is_closed(self) -> bool:
        return self._state is _CLOSED

    @property
    def negotiated(self) -> Negotiated:
        return Negotiated(self._channel_max, self._frame_max, self._heartbeat)

    @property
    def user(self) -> str:
        return self._user

    @property
    def vhost(self) -> str:
        return self._vhost

    @property
    def open_channels(self) -> frozenset[int]:
        """Channels that are open (not the ones waiting for our Close-Ok)."""
        return frozenset(n for n, c in self._channels.items() if c.state is _CHANNEL_OPEN_STATE)

    # ------------------------------------------------------------------------------ input

    def receive_data(self, data: bytes, now: float) -> list[ev.Event]:
        """Feed bytes from the socket (``b""`` = EOF); return the events they complete."""
        events = self._take_pending()
        if self._state is _CLOSED:
            return events
        if not data:
            self._state = _CLOSED
            events.append(ev.ConnectionTerminated("client closed the connection"))
            return events
        self._now = self._last_recv = now
        if self._state is ConnectionState.AWAITING_HEADER:
            rest = self._receive_header(data, events)
            if rest is None:
                return events
            data = rest
        self._reader.feed(data)
        if self._held:
            # Waiting for accept_*/refuse_*: nothing is parsed meanwhile. A client may pipeline
            # a few frames, not megabytes: bound what it can make us buffer.
            if self._reader.buffered > 4 * self._reader.max_payload:
                self._state = _CLOSED
                self._held = False
                events.append(
                    ev.ConnectionTerminated("too much data sent before the handshake finished")
                )
            return events
        self._pump(events)
        return events

    def take_events(self) -> list[ev.Event]:
        """Events produced outside ``receive_data``/``handle_timer``: by held frames that an
        ``accept_*`` call released, or by ``refuse_login``. Call it after answering."""
        return self._take_pending()

    def _take_pending(self) -> list[ev.Event]:
        if not self._pending:
            return []
        events, self._pending = self._pending, []
        return events

    def _pump(self, events: list[ev.Event]) -> None:
        reader = self._reader
        scan = self._scan
        while not self._held and self._state is not _CLOSED:
            if scan is not None and self._state is _OPEN:
                # The compiled scan takes what it can of the per-message frames; the frame it
                # stops at, if any, is this path's to take (native/frames.c).
                buffer, pos = reader.unread()
                reader.skip_to(scan(buffer, pos, reader.max_payload, self._channels, events))
            try:
                frame = reader.next_frame()
            except FrameError as error:
                self._fatal(error, events)
                return
            if frame is None:
                return
            frame_type, channel, payload = frame
            try:
                if channel:
                    self._channel_frame(frame_type, channel, payload, events)
                else:
                    self._connection_frame(frame_type, payload, events)
            except ChannelError as error:
                self._soft_error(channel, error, events)
            except AMQPError as error:
                self._hard_error(error, events)

    # ------------------------------------------------------------- channel > 0 frames

    def _channel_frame(
        self, frame_type: int, number: int, payload: bytes, events: list[ev.Event]
    ) -> None:
        state = self._state
        if state is not _OPEN:
            if state is _CLOSING:
                return
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME,
                f"frame of type {frame_type} on channel {number} before the connection is open",
            )
        if frame_type == FRAME_HEARTBEAT:
            # §4.2.3 heartbeat frames "MUST have a channel number of zero" → 501.
            raise ConnectionException(ReplyCode.FRAME_ERROR, f"heartbeat frame on channel {number}")
        channel = self._channels.get(number)
        if channel is None:
            self._unopened_channel_frame(frame_type, number, payload, events)
            return
        if channel.state is not _CHANNEL_OPEN_STATE:
            self._closing_channel_frame(channel, frame_type, payload, events)
            return
        if frame_type == FRAME_METHOD:
            self._channel_method(channel, payload, events)
        elif frame_type == FRAME_BODY:
            message = channel.on_body(payload)
            if message is not None:
                events.append(message)
        elif frame_type == FRAME_HEADER:
            message = channel.on_header(payload)
            if message is not None:
                events.append(message)

    def _unopened_channel_frame(
        self, frame_type: int, number: int, payload: bytes, events: list[ev.Event]
    ) -> None:
        if frame_type == FRAME_METHOD and len(payload) >= 4:
            (index,) = _INDEX.unpack_from(payload, 0)
            if index == _CHANNEL_OPEN:
                decode_method(payload)  # validates the (deprecated) out-of-band field
                if number > self._channel_max:
                    raise ConnectionException(
                        ReplyCode.NOT_ALLOWED,
                        f"channel number {number} exceeds the negotiated channel_max "
                        f"({self._channel_max})",
                        20,
                        10,
                    )
                self._channels[number] = Channel(number, self.settings.max_message_size)
                self._write_method(number, _CHANNEL_OPEN_OK)
                events.append(ev.ChannelOpened(number))
                return
            # Name the method in the Close only if it is one: a Close's class/method ids
            # must identify a method of the spec (an unknown one is named in the text).
            if index in SPECS:
                raise _method_error(
                    ReplyCode.CHANNEL_ERROR, f"expected 'channel.open' on channel {number}", index
                )
            raise ConnectionException(
                ReplyCode.CHANNEL_ERROR,
                f"expected 'channel.open' on channel {number}, "
                f"got unknown method {index >> 16}.{index & 0xFFFF}",
            )
        raise ConnectionException(
            ReplyCode.CHANNEL_ERROR, f"expected 'channel.open' on channel {number}"
        )

    def _closing_channel_frame(
        self, channel: Channel, frame_type: int, payload: bytes, events: list[ev.Event]
    ) -> None:
        """After our Channel.Close everything but Close-Ok/Close is discarded (§4.2.4); after
        the client's, everything (it has nothing more to say before our Close-Ok)."""
        if (
            frame_type != FRAME_METHOD
            or len(payload) < 4
            or channel.state is _CHANNEL_CLOSE_RECEIVED_STATE
        ):
            return
        (index,) = _INDEX.unpack_from(payload, 0)
        if index == _CHANNEL_CLOSE_OK:
            del self._channels[channel.number]
            events.append(
                ev.ChannelClosed(channel.number, channel.close_code, channel.close_text, False)
            )
        elif index == _CHANNEL_CLOSE:
            # Simultaneous close: answer theirs and keep waiting for the Close-Ok to ours.
            self._write_method(channel.number, _CHANNEL_CLOSE_OK_PAYLOAD)

    def _channel_method(self, channel: Channel, payload: bytes, events: list[ev.Event]) -> None:
        if channel.in_content:
            raise channel.unexpected_method()
        if len(payload) < 4:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR, f"method frame of {len(payload)} octets has no method id"
            )
        (index,) = _INDEX.unpack_from(payload, 0)
        number = channel.number
        # The per-message methods first, without building pamqp objects.
        if index == PUBLISH:
            exchange, routing_key, mandatory, immediate = decode_publish(payload)
            if immediate:
                raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "immediate=true", 60, 40)
            channel.start_content(exchange, routing_key, mandatory, immediate)
            return
        if index == ACK:
            tag, multiple = decode_ack(payload)
            events.append(ev.AckReceived(number, tag, multiple))
            return
        if index == NACK:
            tag, multiple, requeue = decode_nack(payload)
            events.append(ev.NackReceived(number, tag, multiple, requeue))
            return
        if index == REJECT:
            tag, requeue = decode_reject(payload)
            events.append(ev.RejectReceived(number, tag, requeue))
            return
        method = decode_method(payload, typed_tables=True)
        cls = type(method)
        if index >> 16 == 10:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"{method_name(method)} is only allowed on channel 0",
                10,
                index & 0xFFFF,
            )
        if cls not in CLIENT_METHODS:
            raise _method_error(
                ReplyCode.COMMAND_INVALID,
                f"{method_name(method)} is sent by servers, not clients",
                index,
            )
        if isinstance(method, commands.Channel.Close):
            # Close-Ok once the shell has given back what the channel held: accept_channel_close.
            channel.state = _CHANNEL_CLOSE_RECEIVED_STATE
            events.append(
                ev.ChannelClosed(number, int(method.reply_code or 0), method.reply_text, True)
            )
        elif cls is commands.Channel.Open:
            raise ConnectionException(ReplyCode.CHANNEL_ERROR, "second 'channel.open' seen", 20, 10)
        elif isinstance(method, commands.Channel.Flow):
            # As RabbitMQ 4 (rabbit_channel:handle_method/3): active=true is answered, and
            # active=false, a client asking the server to stop delivering, is refused with the
            # connection error 540 "NOT_IMPLEMENTED - active=false" (clients' test suites,
            # amqp091-go's TestIntegrationConsumeFlow, expect it). Basic.Qos is the way to
            # pace a consumer.
            if not method.active:
                raise ConnectionException(ReplyCode.NOT_IMPLEMENTED, "active=false", 20, 20)
            self._send(number, commands.Channel.FlowOk(active=True))
        elif cls is commands.Channel.CloseOk or cls is commands.Channel.FlowOk:
            # Replies to methods we never sent (we send Channel.Flow never, and a Close-Ok
            # for a close that completed already is harmless): ignored.
            return
        else:
            command = command_from(method)
            if command is None:
                raise _method_error(
                    ReplyCode.NOT_IMPLEMENTED,
                    f"{method_name(method)} is not supported by this gateway",
                    index,
                )
            events.append(ev.CommandReceived(number, command))

    # ------------------------------------------------------------------------- errors

    def _soft_error(self, number: int, error: AMQPError, events: list[ev.Event]) -> None:
        channel = self._channels.get(number)
        if channel is None or channel.state is not _CHANNEL_OPEN_STATE:
            return
        self._start_channel_close(channel, error)
        events.append(ev.ChannelErrored(number, error))

    def _hard_error(self, error: AMQPError, events: list[ev.Event]) -> None:
        if self._state in (_CLOSING, _CLOSED):
            return
        self._start_connection_close(error)
        events.append(ev.ConnectionErrored(error))

    def _fatal(self, error: FrameError, events: list[ev.Event]) -> None:
        """A framing error: tell the client if we still can, then stop reading for good."""
        if self._state is not _CLOSING:
            self._start_connection_close(error)
            events.append(ev.ConnectionErrored(error))
        self._state = _CLOSED
        events.append(ev.ConnectionTerminated(error.reply_text))

    def _start_connection_close(self, error: AMQPError) -> None:
        self._send(
            0,
            commands.Connection.Close(
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )
        self._close_code = error.reply_code
        self._close_text = error.reply_text
        self._state = _CLOSING
        self._channels.clear()
        self._held = False

    def _start_channel_close(self, channel: Channel, error: AMQPError) -> None:
        self._send(
            channel.number,
            commands.Channel.Close(
                reply_code=error.reply_code,
                reply_text=error.reply_text,
                class_id=error.class_id,
                method_id=error.method_id,
            ),
        )
        channel.state = _CHANNEL_CLOSING_STATE
        channel.close_code = error.reply_code
        channel.close_text = error.reply_text
        channel.reset_content()

    # ------------------------------------------------------------------------- commands

    def send_method(self, channel: int, method: base.Frame) -> bool:
        """Queue any method (e.g. Queue.Declare-Ok, Basic.Consume-Ok) on an open channel.

        Returns False (and sends nothing) when the channel or the connection is closed or
        closing: the shell need not track that itself. Use ``close_channel`` and
        ``close_connection`` for Close, and ``codec.make_method`` to build methods whose
        names pamqp's constructors would refuse.
        """
        if not self._can_send(channel):
            return False
        self._send(channel, method)
        return True

    def send_reply(self, channel: int, command: Command, reply: Reply) -> bool:
        """Answer ``command`` with ``reply`` (e.g. Queue.Declare-Ok), unless the client asked
        for ``nowait``; False when nothing was sent (see ``send_method``)."""
        if command.nowait or not self._can_send(channel):
            return False
        self._write_method(channel, encode_reply(reply))
        return True

    def refuse(self, channel: int, error: AMQPError, cause: ev.Cause | None = None) -> None:
        """Refuse what the client asked on ``channel``: Channel.Close for a soft error,
        Connection.Close for a hard one (or any error on channel 0). The Close names the
        class and method of ``cause`` (the command or publish refused), unless ``error``
        names one already."""
        if cause is not None:
            error = error.with_method(*cause.METHOD)
        if error.is_hard or channel == 0:
            self.close_connection(error)
        else:
            self.close_channel(channel, error)

    def send_deliver(
        self,
        channel: int,
        consumer_tag: str,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        header: HeaderLike,
        body: bytes,
    ) -> bool:
        """Basic.Deliver + content, body split by the negotiated frame_max."""
        if not self._can_send(channel):
            return False
        # Once per message delivered: ``_write`` and the common case of ``_raw_properties``
        # written out here, two calls less.
        self._out.append(
            encode_deliver(
                channel,
                consumer_tag,
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                header if type(header) is bytes else _raw_properties(header),
                body,
                self._frame_max,
            )
        )
        self._last_send = self._now
        return True

    def send_get_ok(
        self,
        channel: int,
        delivery_tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        message_count: int,
        header: HeaderLike,
        body: bytes,
    ) -> bool:
        if not self._can_send(channel):
            return False
        self._write(
            encode_get_ok(
                channel,
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                message_count,
                _raw_properties(header),
                body,
                self._frame_max,
            )
        )
        return True

    def send_return(
        self,
        channel: int,
        reply_code: int,
        reply_text: str,
        exchange: str,
        routing_key: str,
        header: HeaderLike,
        body: bytes,
    ) -> bool:
        """Basic.Return (e.g. 312 NO_ROUTE for an unroutable mandatory message)."""
        if not self._can_send(channel):
            return False
        self._write(
            encode_return(
                channel,
                reply_code,
                reply_text,
                exchange,
                routing_key,
                _raw_properties(header),
                body,
                self._frame_max,
            )
        )
        return True

    def send_ack(self, channel: int, delivery_tag: int, multiple: bool) -> bool:
        """Publisher confirm: Basic.Ack."""
        if not self._can_send(channel):
            return False
        self._write(encode_ack(channel, delivery_tag, multiple))
        return True

    def send_nack(
        self, channel: int, delivery_tag: int, multiple: bool, requeue: bool = False
    ) -> bool:
        """Publisher confirm: Basic.Nack (the write to Pulsar failed)."""
        if not self._can_send(channel):
            return False
        self._write(encode_nack(channel, delivery_tag, multiple, requeue))
        return True

    def send_consumer_cancel(self, channel: int, consumer_tag: str) -> bool:
        """Server-initiated Basic.Cancel (queue deleted, …), only if the client advertised
        ``consumer_cancel_notify`` — RabbitMQ sends nothing to other clients."""
        if self.client_capabilities.get("consumer_cancel_notify") is not True:
            return False
        method = commands.Basic.Cancel.__new__(commands.Basic.Cancel)
        method.consumer_tag = consumer_tag
        method.nowait = True
        return self.send_method(channel, method)

    def send_blocked(self, reason: str) -> bool:
        """Connection.Blocked, only if the client advertised ``connection.blocked``."""
        if not self._may_notify_blocked():
            return False
        self._send(0, commands.Connection.Blocked(reason=reason))
        return True

    def send_unblocked(self) -> bool:
        if not self._may_notify_blocked():
            return False
        self._send(0, commands.Connection.Unblocked())
        return True

    def _may_notify_blocked(self) -> bool:
        return self._state is _OPEN and self.client_capabilities.get("connection.blocked") is True

    def close_channel(self, channel: int, error: AMQPError) -> None:
        """Server-initiated Channel.Close; then only Close-Ok (→ ``ChannelClosed``) counts."""
        if self._state is not _OPEN:
            return
        ch = self._channels.get(channel)
        if ch is None or ch.state is not _CHANNEL_OPEN_STATE:
            return
        self._start_channel_close(ch, error)

    def accept_channel_close(self, channel: int) -> bool:
        """Answer the client's Channel.Close (``ChannelClosed(by_client=True)``) with Close-Ok,
        once the shell has dropped the channel's work and given its unacknowledged messages
        back: RabbitMQ requeues them before its Close-Ok, so a client that opens a consumer or
        counts the queue as soon as it has Close-Ok finds them there. The channel number is
        free again from here. False when there is nothing to answer (the connection closed or
        is closing meanwhile, or the channel was not waiting for it)."""
        ch = self._channels.get(channel)
        if ch is None or ch.state is not _CHANNEL_CLOSE_RECEIVED_STATE:
            return False
        del self._channels[channel]
        if self._state is not _OPEN:
            return False
        self._write_method(channel, _CHANNEL_CLOSE_OK_PAYLOAD)
        return True

    def close_connection(self, error: AMQPError) -> None:
        """Server-initiated Connection.Close (e.g. 320 CONNECTION_FORCED on shutdown); then
        only Close-Ok (→ ``ConnectionClosed(by_client=False)``) counts."""
        if self._state in (_CLOSING, _CLOSED):
            return
        if self._state is ConnectionState.AWAITING_HEADER:
            # Nothing can be said before the protocol header: just hang up.
            self._state = _CLOSED
            self._pending.append(ev.ConnectionTerminated(error.reply_text))
            return
        self._start_connection_close(error)
        self._release()

    def _can_send(self, channel: int) -> bool:
        if self._state is not _OPEN:
            return False
        if channel == 0:
            return True
        ch = self._channels.get(channel)
        return ch is not None and ch.state is _CHANNEL_OPEN_STATE

    # ------------------------------------------------------------------------- output

    def data_to_send(self) -> bytes:
        """Everything queued for the socket since the last call."""
        if not self._out:
            return b""
        data = self._out[0] if len(self._out) == 1 else b"".join(self._out)
        self._out = []
        return data

    def _write(self, data: bytes) -> None:
        self._out.append(data)
        self._last_send = self._now

    def _write_method(self, channel: int, payload: bytes) -> None:
        self._write(method_frame(channel, payload))

    def _send(self, channel: int, method: base.Frame) -> None:
        self._write(method_frame(channel, encode_method(method)))

    # -------------------------------------------------------------------------- time

    def next_deadline(self) -> float | None:
        """When ``handle_timer`` must next run; ``None`` while heartbeats are off."""
        if not self._heartbeat or self._state not in _HEARTBEAT_STATES:
            return None
        return min(
            self._last_send + self._heartbeat / 2,
            self._last_recv + self._heartbeat * self.settings.heartbeat_timeout_factor,
        )

    def not_reading(self, now: float) -> None:
        """The shell has not read since it took the last bytes: a method of this connection
        is waiting on Pulsar or ZooKeeper. What the peer sent meanwhile (its heartbeats
        among it) is waiting in the socket, so its silence proves nothing yet: RabbitMQ's
        reader keeps reading heartbeats while a channel waits. A dead peer is still found
        once reading resumes."""
        self._last_recv = max(self._last_recv, now)

    def handle_timer(self, now: float) -> list[ev.Event]:
        """Send a heartbeat when we have been quiet for half the interval (as RabbitMQ
        does, so that a client's "two missed heartbeats" never trips); declare the peer dead
        after ``heartbeat * heartbeat_timeout_factor`` seconds without a byte from it."""
        events = self._take_pending()
        if not self._heartbeat or self._state not in _HEARTBEAT_STATES:
            return events
        self._now = now
        if now >= self._last_recv + self._heartbeat * self.settings.heartbeat_timeout_factor:
            self._state = _CLOSED
            events.append(ev.HeartbeatTimedOut())
            return events
        if now >= self._last_send + self._heartbeat / 2:
            self._write(HEARTBEAT_FRAME)
        return events


def _method_error(code: int, text: str, index: int) -> ConnectionException:
    """A hard error naming the method ``index`` (class id << 16 | method id)."""
    return ConnectionException(code, text, index >> 16, index & 0xFFFF)


def _raw_properties(header: HeaderLike) -> bytes:
    if isinstance(header, bytes):
        return header
    if isinstance(header, MessageProperties):
        return encode_properties(header)
    return bytes(header.marshal())
