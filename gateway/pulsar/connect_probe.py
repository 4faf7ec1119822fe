"""One Pulsar binary-protocol handshake (CONNECT → CONNECTED or ERROR), written out by hand.

The start-up check needs to know whether the broker accepts the gateway's credentials on the
binary protocol. pulsar-client cannot tell: it retries refused credentials (and a port that
drops the connection) until its operation timeout and reports "Timeout", and whatever it tries
is logged by its process-wide C++ logger. A CONNECT command is the first frame of every Pulsar
connection and the broker authenticates it before anything else, so sending it is the exact
check, with nothing created and nothing logged on our side.

Framing (Pulsar binary protocol): ``[total size: u32][command size: u32][BaseCommand]``, sizes big
endian, BaseCommand a protobuf message (PulsarApi.proto). Only the few fields needed are encoded
and decoded, by field number.
"""

from __future__ import annotations

import ssl
import struct
from dataclasses import dataclass

import trio

from gateway.pulsar.protobuf_fields import fields

CLIENT_VERSION = b"starlight-rabbitmq start-up check"
PROTOCOL_VERSION = 21  # what pulsar-client 3.x announces; the broker answers with its own

# BaseCommand.Type values and field numbers (PulsarApi.proto).
_CONNECT = 2
_CONNECTED = 3
_ERROR = 14
_FIELD_TYPE = 1
_FIELD_CONNECT = 2
_FIELD_ERROR = 14
# ServerError values the check cares about.
SERVER_ERRORS = {3: "AuthenticationError", 4: "AuthorizationError"}
# A CONNECTED or ERROR answer is a few hundred bytes; anything bigger is not a Pulsar broker.
_MAX_FRAME = 64 * 1024


class ProbeFailed(Exception):
    """The handshake did not complete: no connection, TLS failed, or no Pulsar answer."""


@dataclass(frozen=True, slots=True)
class ConnectAnswer:
    """The broker's answer: ``connected``, or the error it sent (e.g. AuthenticationError)."""

    connected: bool
    error: str = ""
    message: str = ""


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _bytes_field(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def connect_frame(auth_method: str | None, auth_data: bytes) -> bytes:
    """The CONNECT frame; ``auth_method`` as Pulsar names it ("token", "tls") or None."""
    connect = _bytes_field(1, CLIENT_VERSION)  # client_version
    if auth_method is not None:
        connect += _bytes_field(3, auth_data)  # auth_data
    connect += _varint_field(4, PROTOCOL_VERSION)  # protocol_version
    if auth_method is not None:
        connect += _bytes_field(5, auth_method.encode())  # auth_method_name
    command = _varint_field(_FIELD_TYPE, _CONNECT) + _bytes_field(_FIELD_CONNECT, connect)
    return struct.pack(">II", len(command) + 4, len(command)) + command


def parse_answer(frame: bytes) -> ConnectAnswer:
    """The broker's answer from one frame without its total-size prefix."""
    if len(frame) < 4:
        raise ValueError("frame too short")
    (command_size,) = struct.unpack(">I", frame[:4])
    command = fields(frame[4 : 4 + command_size])
    kind = command.get(_FIELD_TYPE)
    if kind == _CONNECTED:
        return ConnectAnswer(connected=True)
    if kind == _ERROR:
        raw = command.get(_FIELD_ERROR, b"")
        error = fields(raw) if isinstance(raw, bytes) else {}
        code, text = error.get(2), error.get(3)
        name = ""
        if isinstance(code, int):
            name = SERVER_ERRORS.get(code) or f"ServerError {code}"
        message = text.decode(errors="replace") if isinstance(text, bytes) else ""
        return ConnectAnswer(connected=False, error=name, message=message)
    raise ValueError(f"unexpected answer to CONNECT (command type {kind!r})")


async def _receive_exactly(stream: trio.abc.ReceiveStream, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = await stream.receive_some(count - len(data))
        if not chunk:
            raise ProbeFailed("the broker closed the connection without answering")
        data += chunk
    return bytes(data)


async def probe_connect(
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None,
    auth_method: str | None,
    auth_data: bytes = b"",
    timeout: float = 10.0,
) -> ConnectAnswer:
    """Open a connection (TLS with ``ssl_context``), send CONNECT, return the broker's answer.

    Raises ProbeFailed (with the ssl error as its cause, if any) when there is no answer. Errors
    of the TLS handshake arrive as ``trio.BrokenResourceError`` caused by an ``ssl.SSLError``.
    """
    stream: trio.abc.Stream
    try:
        with trio.fail_after(timeout):
            if ssl_context is None:
                stream = await trio.open_tcp_stream(host, port)
            else:
                stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=ssl_context)
            try:
                await stream.send_all(connect_frame(auth_method, auth_data))
                (size,) = struct.unpack(">I", await _receive_exactly(stream, 4))
                if not 4 <= size <= _MAX_FRAME:
                    raise ProbeFailed(f"the answer is not a Pulsar frame (size {size})")
                return parse_answer(await _receive_exactly(stream, size))
            finally:
                await trio.aclose_forcefully(stream)
    except trio.TooSlowError:
        raise ProbeFailed(f"no answer within {timeout:g} s") from None
    except (OSError, trio.BrokenResourceError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ProbeFailed(str(reason) or type(error).__name__) from error
    except ValueError as error:
        raise ProbeFailed(f"the answer is not a Pulsar frame ({error})") from None
