"""Framing: the protocol header, splitting the byte stream into frames, and writing frames.

AMQP 0-9-1 §4.2.3: every frame is ``type(1) channel(2) size(4) payload(size) frame-end(0xCE)``.
pamqp cannot do this part for a server (it cannot tell "need more bytes" from "garbage", never
checks frame_max and sniffs other protocol headers on every call; NOTES), so the stream is
framed here and pamqp only ever sees whole method payloads — and only for methods without a
hand-written fast path.

Protocol errors raise ``FrameError`` (501 FRAME_ERROR, a hard error). After one, the stream
is out of sync: the connection must stop reading (RabbitMQ's ``fatal_frame_error``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from gateway.amqp.errors import FrameError

FRAME_METHOD = 1
FRAME_HEADER = 2
FRAME_BODY = 3
FRAME_HEARTBEAT = 8
FRAME_END = 0xCE
FRAME_END_BYTE = b"\xce"
FRAME_HEADER_SIZE = 7
# Header + frame-end: what a frame costs on top of its payload (the spec's "frame overhead").
FRAME_OVERHEAD = 8
# §4.2.3: "frame-min-size" — the smallest frame_max a peer may negotiate.
FRAME_MIN_SIZE = 4096
# Until Tune-Ok no frame_max is agreed: RabbitMQ then refuses a frame whose payload exceeds
# its initial_frame_max (rabbit_reader, a fatal frame_too_large): 4096 up to 4.0, 8192 since
# 4.1 (rabbitmq-server#13541: JWTs sent as passwords in Start-Ok need the room). We follow 4.1.
INITIAL_FRAME_MAX = 8192

# The only header we speak. §4.2.2: on any other, the server "MUST respond with a valid
# protocol header and then close the socket connection". RabbitMQ also tolerates the 0-9
# header ``AMQP\x01\x01\x00\x09``; we do not (docs/protocol.md).
PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"

_FRAME_HEADER = struct.Struct(">BHI")
_KNOWN_TYPES = frozenset({FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT})

HEARTBEAT_FRAME = _FRAME_HEADER.pack(FRAME_HEARTBEAT, 0, 0) + FRAME_END_BYTE

Frame = tuple[int, int, bytes]
"""(frame type, channel, payload)."""


def is_protocol_header(data: bytes) -> bool:
    """Whether the first 8 bytes the client sent are exactly the 0-9-1 header."""
    return bytes(data[:8]) == PROTOCOL_HEADER


class FrameReader:
    """Incremental frame splitter: ``feed`` bytes, then call ``next_frame`` until ``None``.

    ``max_payload`` is the largest payload accepted. A frame header announcing more is refused
    as soon as its 7 bytes are here, before any of the payload is buffered, so a client cannot
    make us hold more than one frame_max of its data. RabbitMQ allows 8 octets of slack over
    ``frame_max - 8`` because some clients count the overhead wrongly; we do the same by
    setting ``max_payload = frame_max`` (see ``ServerConnection``).

    Payloads are ``bytes``. When a whole chunk from the socket holds whole frames (the common
    case) payloads are slices of it and the chunk itself is never copied into a buffer.
    """

    __slots__ = ("_buf", "_pos", "max_payload")

    def __init__(self, max_payload: int) -> None:
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self.max_payload = max_payload

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        if not data:
            return
        buf = self._buf
        if self._pos >= len(buf):
            # Everything before was consumed: parse straight out of the new chunk.
            self._buf = data if type(data) is bytes else bytes(data)
            self._pos = 0
        elif type(buf) is bytearray:
            if self._pos:
                # CPython deletes from the front of a bytearray without moving the rest.
                del buf[: self._pos]
                self._pos = 0
            buf += data
        else:
            rest = bytearray(memoryview(buf)[self._pos :])
            rest += data
            self._buf = rest
            self._pos = 0

    def unread(self) -> tuple[bytes | bytearray, int]:
        """The buffer and where its unread bytes start, for a scan that takes whole frames
        itself (gateway/amqp/compiled.py); ``skip_to`` then says where it stopped."""
        return self._buf, self._pos

    def skip_to(self, pos: int) -> None:
        """Mark the bytes before ``pos`` of ``unread()``'s buffer as taken."""
        self._pos = pos

    def next_frame(self) -> Frame | None:
        """The next complete frame, ``None`` if more bytes are needed; raises FrameError."""
        buf = self._buf
        pos = self._pos
        available = len(buf) - pos
        if available < FRAME_HEADER_SIZE:
            return None
        frame_type, channel, size = _FRAME_HEADER.unpack_from(buf, pos)
        if frame_type not in _KNOWN_TYPES:
            # RabbitMQ: frame_error(unknown_frame, ...); §4.2.3 "MUST treat ... as a
            # connection exception with reply code 501".
            raise FrameError(f"unknown frame type {frame_type} on channel {channel}")
        if size > self.max_payload:
            raise FrameError(
                f"frame of {size} octets on channel {channel} exceeds frame_max "
                f"({self.max_payload} octets of payload)"
            )
        end = pos + FRAME_HEADER_SIZE + size
        if available < FRAME_HEADER_SIZE + size + 1:
            return None
        if buf[end] != FRAME_END:
            raise FrameError(f"invalid frame end marker 0x{buf[end]:02x} on channel {channel}")
        start = pos + FRAME_HEADER_SIZE
        if type(buf) is bytes:
            payload = buf[start:end]
        else:
            with memoryview(buf) as view:
                payload = view[start:end].tobytes()
        self._pos = end + 1
        return frame_type, channel, payload


# ------------------------------------------------------------------------------ writing


def frame(frame_type: int, channel: int, payload: bytes) -> bytes:
    return _FRAME_HEADER.pack(frame_type, channel, len(payload)) + payload + FRAME_END_BYTE


def method_frame(channel: int, payload: bytes) -> bytes:
    """``payload`` already starts with the class and method ids."""
    return _FRAME_HEADER.pack(FRAME_METHOD, channel, len(payload)) + payload + FRAME_END_BYTE


def body_frames(channel: int, body: bytes, frame_max: int) -> Iterator[bytes]:
    """Content body frames of at most ``frame_max`` octets each (§4.2.6.2).

    A zero-length body is sent as no body frame at all, like RabbitMQ and the Java client.
    """
    chunk = frame_max - FRAME_OVERHEAD
    size = len(body)
    if size <= chunk:
        if size:
            yield _FRAME_HEADER.pack(FRAME_BODY, channel, size)
            yield body
            yield FRAME_END_BYTE
        return
    view = memoryview(body)
    for start in range(0, size, chunk):
        piece = view[start : start + chunk]
        yield _FRAME_HEADER.pack(FRAME_BODY, channel, len(piece))
        yield piece.tobytes()
        yield FRAME_END_BYTE


def split_body(body: bytes, frame_max: int) -> list[bytes]:
    """The payloads ``body_frames`` would carry, for callers that frame them differently."""
    chunk = frame_max - FRAME_OVERHEAD
    return [body[i : i + chunk] for i in range(0, len(body), chunk)]
