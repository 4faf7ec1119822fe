"""The connection handshake of ``ServerConnection``, and what it reads on channel 0.

§4.2.2 and RabbitMQ's ``rabbit_reader``: the protocol header, Start/Start-Ok (the client's
mechanism and properties), the login decision (``accept_login``/``refuse_login``), Tune/Tune-Ok
(negotiating channel-max, frame-max and heartbeat), Open (the vhost decision) and, once open,
Connection.Close, Update-Secret and heartbeats on channel 0. A mixin of
:class:`~gateway.amqp.connection.ServerConnection`, which owns the state declared below.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from pamqp import base, commands

from gateway.amqp import events as ev
from gateway.amqp.capabilities import server_properties
from gateway.amqp.channel import Channel
from gateway.amqp.codec import decode_method, spec_for
from gateway.amqp.connection_settings import (
    CHANNEL_MAX_LIMIT,
    ConnectionSettings,
    ConnectionState,
)
from gateway.amqp.errors import AMQPError, ConnectionException, ReplyCode, amqp_error
from gateway.amqp.framing import (
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_MIN_SIZE,
    PROTOCOL_HEADER,
    FrameReader,
)
from gateway.amqp.proxy_protocol import looks_like_proxy_header

_INDEX = struct.Struct(">I")
_CONNECTION_CLOSE = 0x000A0032
_CONNECTION_CLOSE_OK = 0x000A0033
_CONNECTION_CLOSE_OK_PAYLOAD = _INDEX.pack(_CONNECTION_CLOSE_OK)


class ConnectionHandshake:
    """Channel 0 of a :class:`~gateway.amqp.connection.ServerConnection`."""

    # The connection's state, created by ServerConnection.__init__ (declared for mypy).
    settings: ConnectionSettings
    client_properties: dict[str, Any]
    client_capabilities: dict[str, Any]
    _state: ConnectionState
    _reader: FrameReader
    _header: bytearray
    _pending: list[ev.Event]
    _held: bool
    _channels: dict[int, Channel]
    _channel_max: int
    _frame_max: int
    _heartbeat: int
    _last_recv: float
    _last_send: float
    _close_code: int
    _close_text: str
    _user: str
    _vhost: str
    _close_ok_owed: bool
    peer_closes_socket: bool

    if TYPE_CHECKING:
        # ServerConnection's output and frame loop.
        def _send(self, channel: int, method: base.Frame) -> None: ...
        def _write(self, data: bytes) -> None: ...
        def _write_method(self, channel: int, payload: bytes) -> None: ...
        def _pump(self, events: list[ev.Event]) -> None: ...
        def _start_connection_close(self, error: AMQPError) -> None: ...

    def _receive_header(self, data: bytes, events: list[ev.Event]) -> bytes | None:
        """Consume the protocol header; return the bytes after it, None to stop here."""
        need = 8 - len(self._header)
        self._header += data[:need]
        if len(self._header) < 8:
            return None
        if bytes(self._header) != PROTOCOL_HEADER:
            # §4.2.2: answer with the header we do support, then close.
            self._write(PROTOCOL_HEADER)
            self._state = ConnectionState.CLOSED
            events.append(ev.ConnectionTerminated(_bad_header_reason(bytes(self._header))))
            return None
        start = commands.Connection.Start(
            version_major=0,
            version_minor=9,
            server_properties={
                **server_properties(self.settings),
                **self.settings.extra_server_properties,
            },
            mechanisms=" ".join(self.settings.mechanisms),
            locales=" ".join(self.settings.locales),
        )
        self._send(0, start)
        self._state = ConnectionState.STARTING
        return data[need:]

    # ----------------------------------------------------------------- channel 0 frames

    def _connection_frame(self, frame_type: int, payload: bytes, events: list[ev.Event]) -> None:
        if frame_type == FRAME_HEARTBEAT:
            if payload:
                raise ConnectionException(ReplyCode.FRAME_ERROR, "heartbeat frame with a payload")
            return
        if self._state is ConnectionState.CLOSING:
            self._closing_frame(frame_type, payload, events)
            return
        if frame_type != FRAME_METHOD:
            # RabbitMQ: unexpected_frame for content frames on channel 0.
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME, f"content frame (type {frame_type}) on channel 0"
            )
        method = decode_method(payload)
        state = self._state
        if isinstance(method, commands.Connection.Close):
            # Close-Ok once the shell has closed the channels: accept_connection_close.
            self._owe_close_ok()
            self._channels.clear()
            events.append(ev.ConnectionClosed(int(method.reply_code or 0), method.reply_text, True))
        elif isinstance(method, commands.Connection.StartOk) and state is ConnectionState.STARTING:
            self._on_start_ok(method, events)
        elif isinstance(method, commands.Connection.TuneOk) and state is ConnectionState.TUNING:
            self._on_tune_ok(method)
        elif isinstance(method, commands.Connection.Open) and state is ConnectionState.OPENING:
            self._vhost = method.virtual_host
            self._state = ConnectionState.VHOST_CHECK
            self._held = True
            events.append(ev.VhostRequested(method.virtual_host))
        elif isinstance(method, commands.Connection.UpdateSecret) and state is ConnectionState.OPEN:
            events.append(
                ev.UpdateSecretRequested(_as_bytes(method.new_secret), method.reason or "")
            )
        else:
            # RabbitMQ's handle_method0 catch-all: any other method on channel 0, or a
            # connection method out of order, is a channel_error.
            spec = spec_for(method)
            raise ConnectionException(
                ReplyCode.CHANNEL_ERROR,
                f"unexpected method {spec.name} in connection state {state.value}",
                spec.class_id,
                spec.method_id,
            )

    def _on_start_ok(self, method: commands.Connection.StartOk, events: list[ev.Event]) -> None:
        mechanism = method.mechanism
        if mechanism not in self.settings.mechanisms:
            raise ConnectionException(
                ReplyCode.COMMAND_INVALID,
                f"unknown authentication mechanism '{mechanism}'",
                10,
                11,
            )
        props = method.client_properties or {}
        self.client_properties = props
        capabilities = props.get("capabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        self._state = ConnectionState.AUTHENTICATING
        self._held = True
        events.append(
            ev.LoginRequested(mechanism, _as_bytes(method.response), props, method.locale)
        )

    def _on_tune_ok(self, method: commands.Connection.TuneOk) -> None:
        # RabbitMQ's validate_negotiated_integer_value: below the minimum or above what we
        # offered is 530 NOT_ALLOWED. Unlike RabbitMQ, a 0 ("no limit") from the client is
        # read as "whatever the server offered" rather than refused (docs/protocol.md).
        frame_max = method.frame_max or self.settings.frame_max
        if frame_max < FRAME_MIN_SIZE:
            raise self._negotiation_error("frame_max", frame_max, "lower", "minimum", 4096)
        if frame_max > self.settings.frame_max:
            raise self._negotiation_error(
                "frame_max", frame_max, "higher", "maximum", self.settings.frame_max
            )
        offered_channels = self.settings.channel_max or CHANNEL_MAX_LIMIT
        channel_max = method.channel_max or offered_channels
        if channel_max > offered_channels:
            raise self._negotiation_error(
                "channel_max", channel_max, "higher", "maximum", offered_channels
            )
        self._frame_max = frame_max
        self._channel_max = channel_max
        self._reader.max_payload = frame_max
        # RabbitMQ uses the client's Tune-Ok heartbeat as is (clients already chose between
        # their wish and our offer); 0 turns heartbeats off.
        self._heartbeat = method.heartbeat
        self._last_send = self._last_recv
        self._state = ConnectionState.OPENING

    @staticmethod
    def _negotiation_error(
        name: str, value: int, direction: str, bound: str, limit: int
    ) -> ConnectionException:
        return ConnectionException(
            ReplyCode.NOT_ALLOWED,
            f"negotiated {name} = {value} is {direction} than the {bound} allowed value ({limit})",
            10,
            31,
        )

    def _owe_close_ok(self) -> None:
        """The client sent Connection.Close: the connection is closed (whatever the client
        sends from here on is not looked at), and Close-Ok is owed until the shell's
        ``accept_connection_close``."""
        self._state = ConnectionState.CLOSED
        self._close_ok_owed = True

    def accept_connection_close(self) -> bool:
        """Answer the client's Connection.Close (``ConnectionClosed`` from a Close of the
        client's) with Close-Ok, once the shell has closed the channels and given their
        unacknowledged messages back: RabbitMQ closes the channels before its Close-Ok, so a
        client that has Close-Ok finds them in their queues. False when nothing is owed.

        Close-Ok "tells the recipient that it is safe to release resources for the connection
        and close the socket" (AMQP 0-9-1, connection.close-ok): the socket is the client's to
        close now (``peer_closes_socket``), and RabbitMQ waits for it to do so.
        """
        if not self._close_ok_owed:
            return False
        self._close_ok_owed = False
        self._write_method(0, _CONNECTION_CLOSE_OK_PAYLOAD)
        self.peer_closes_socket = True
        return True

    def _closing_frame(self, frame_type: int, payload: bytes, events: list[ev.Event]) -> None:
        """After our Connection.Close only Close-Ok and Close matter (§4.2.2 Close)."""
        if frame_type != FRAME_METHOD or len(payload) < 4:
            return
        (index,) = _INDEX.unpack_from(payload, 0)
        if index == _CONNECTION_CLOSE_OK:
            self._state = ConnectionState.CLOSED
            events.append(ev.ConnectionClosed(self._close_code, self._close_text, False))
        elif index == _CONNECTION_CLOSE:
            # Both sides closed at once: theirs is answered (accept_connection_close) once
            # the shell has closed the channels; ours is then moot.
            self._owe_close_ok()
            events.append(ev.ConnectionClosed(self._close_code, self._close_text, False))

    # ------------------------------------------------------------------ handshake answers

    def accept_login(self, user: str) -> None:
        """The credentials from ``LoginRequested`` are good: send Connection.Tune."""
        if self._state is not ConnectionState.AUTHENTICATING:
            return
        self._user = user
        self._send(
            0,
            commands.Connection.Tune(
                channel_max=self.settings.channel_max,
                frame_max=self.settings.frame_max,
                heartbeat=self.settings.heartbeat,
            ),
        )
        self._state = ConnectionState.TUNING
        self._release()

    def refuse_login(self, text: str) -> None:
        """Refuse the login: 403 Connection.Close if the client advertised
        ``authentication_failure_close``, otherwise just close (``ConnectionTerminated``),
        as RabbitMQ does."""
        if self._state is not ConnectionState.AUTHENTICATING:
            return
        if self.client_capabilities.get("authentication_failure_close") is True:
            self._start_connection_close(AMQPError(ReplyCode.ACCESS_REFUSED, text, 10, 11))
            self._release()
        else:
            self._state = ConnectionState.CLOSED
            self._held = False
            self._pending.append(ev.ConnectionTerminated(f"login refused: {text}"))

    def accept_vhost(self) -> None:
        """Access to the vhost from ``VhostRequested`` is granted: send Open-Ok."""
        if self._state is not ConnectionState.VHOST_CHECK:
            return
        self._send(0, commands.Connection.OpenOk())
        self._state = ConnectionState.OPEN
        self._pending.append(ev.ConnectionOpened(self._vhost, self._user))
        self._release()

    def refuse_vhost(self, code: int, text: str) -> None:
        """Refuse the vhost, e.g. 530 NOT_ALLOWED (RabbitMQ's code for "no access" and
        "no such vhost") or 402 INVALID_PATH."""
        if self._state is not ConnectionState.VHOST_CHECK:
            return
        self._start_connection_close(amqp_error(code, text, 10, 40))
        self._release()

    def accept_update_secret(self) -> None:
        """Answer ``UpdateSecretRequested`` with Update-Secret-Ok."""
        if self._state is ConnectionState.OPEN:
            self._send(0, commands.Connection.UpdateSecretOk())

    def _release(self) -> None:
        """Process the frames held while waiting for a decision."""
        self._held = False
        if self._reader.buffered:
            self._pump(self._pending)


def _bad_header_reason(header: bytes) -> str:
    if looks_like_proxy_header(header):
        # A load balancer sends PROXY headers; only listeners told to trust it read them.
        return (
            "PROXY protocol header from a peer not in amqpProxyProtocolTrustedNetworks "
            "(refused: only trusted proxies may say who the client is)"
        )
    return f"unsupported protocol header {header!r}"


def _as_bytes(value: object) -> bytes:
    # codec.decode_method keeps longstr fields as bytes although pamqp annotates them str.
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")
