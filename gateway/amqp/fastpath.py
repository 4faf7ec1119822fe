"""Hand-written ``struct`` codecs for the per-message hot path.

Publish, deliver and ack happen once per message; everything else happens once per
connection, channel or consumer and goes through ``codec``. pamqp costs ≈5 µs to decode a
Basic.Publish, ≈12 µs for a content header and ≈13 µs to marshal a delivery (NOTES); these
functions do the same work with one or two ``struct`` calls (figures in
``bench/bench_codec.py``). They are tested to be byte-identical to pamqp's output and to decode
to the same values (tests/unit/amqp/test_fastpath.py).

They are as strict as ``codec.decode_method``: exact lengths, UTF-8 short strings.
"""

from __future__ import annotations

import struct

from gateway.amqp.errors import ConnectionException, ReplyCode
from gateway.amqp.framing import FRAME_OVERHEAD

PUBLISH = 0x003C0028
DELIVER = 0x003C003C
GET_OK = 0x003C0047
RETURN = 0x003C0032
ACK = 0x003C0050
NACK = 0x003C0078
REJECT = 0x003C005A

_FRAME_HEADER = struct.Struct(">BHI")
_U32 = struct.Struct(">I")
_CONTENT_HEADER = struct.Struct(">HHQ")
# Delivery tag and the bit octet of an ack/nack/reject, after the 4-octet method id.
_TAG_BITS = struct.Struct(">QB")
# frame-end of the method frame, then the content header frame's header and prefix.
_END_THEN_HEADER = struct.Struct(">BBHIHHQ")
# frame-end of the content header frame, then the body frame's header.
_END_THEN_BODY = struct.Struct(">BBHI")
_ACK_FRAME = struct.Struct(">BHIIQBB")
_DELIVER_ID = _U32.pack(DELIVER)
_GET_OK_ID = _U32.pack(GET_OK)
_RETURN_ID = _U32.pack(RETURN)
_END = b"\xce"

# --------------------------------------------------------------------------------- decoding


def _bad(method_id: int, why: str) -> ConnectionException:
    return ConnectionException(ReplyCode.FRAME_ERROR, why, 60, method_id)


def decode_publish(payload: bytes) -> tuple[str, str, bool, bool]:
    """Basic.Publish payload → (exchange, routing_key, mandatory, immediate).

    Layout after the method id: ticket(2) exchange(shortstr) routing-key(shortstr) bits(1).
    """
    end = len(payload)
    if end < 9:
        raise _bad(40, "cannot decode basic.publish: frame too short")
    exchange_stop = 7 + payload[6]
    if exchange_stop >= end:
        raise _bad(40, "cannot decode basic.publish: exchange runs past the end of the frame")
    key_stop = exchange_stop + 1 + payload[exchange_stop]
    if key_stop + 1 != end:
        raise _bad(40, "cannot decode basic.publish: wrong frame length")
    try:
        exchange = payload[7:exchange_stop].decode("utf-8")
        routing_key = payload[exchange_stop + 1 : key_stop].decode("utf-8")
    except UnicodeDecodeError:
        raise ConnectionException(
            ReplyCode.SYNTAX_ERROR,
            "exchange or routing_key of basic.publish is not valid UTF-8",
            60,
            40,
        ) from None
    bits = payload[key_stop]
    return exchange, routing_key, bool(bits & 1), bool(bits & 2)


def decode_content_header(payload: bytes) -> tuple[int, int, int, bytes]:
    """Content header payload → (class_id, weight, body_size, raw flags + property list)."""
    if len(payload) < 14:
        raise ConnectionException(
            ReplyCode.FRAME_ERROR, f"content header of {len(payload)} octets is too short"
        )
    class_id, weight, body_size = _CONTENT_HEADER.unpack_from(payload, 0)
    return class_id, weight, body_size, payload[12:]


def decode_ack(payload: bytes) -> tuple[int, bool]:
    """Basic.Ack payload → (delivery_tag, multiple)."""
    if len(payload) != 13:
        raise _bad(80, "cannot decode basic.ack: wrong frame length")
    tag, bits = _TAG_BITS.unpack_from(payload, 4)
    return tag, bool(bits & 1)


def decode_nack(payload: bytes) -> tuple[int, bool, bool]:
    """Basic.Nack payload → (delivery_tag, multiple, requeue)."""
    if len(payload) != 13:
        raise _bad(120, "cannot decode basic.nack: wrong frame length")
    tag, bits = _TAG_BITS.unpack_from(payload, 4)
    return tag, bool(bits & 1), bool(bits & 2)


def decode_reject(payload: bytes) -> tuple[int, bool]:
    """Basic.Reject payload → (delivery_tag, requeue)."""
    if len(payload) != 13:
        raise _bad(90, "cannot decode basic.reject: wrong frame length")
    tag, bits = _TAG_BITS.unpack_from(payload, 4)
    return tag, bool(bits & 1)


# --------------------------------------------------------------------------------- encoding

# Consumer tags and exchange names repeat on every delivery: keep their encoded form.
_SHORTSTR_CACHE: dict[str, bytes] = {}
_SHORTSTR_CACHE_LIMIT = 4096


def shortstr(value: str) -> bytes:
    """Length-prefixed UTF-8; ValueError above 255 octets."""
    encoded = _SHORTSTR_CACHE.get(value)
    if encoded is None:
        raw = value.encode("utf-8")
        if len(raw) > 255:
            raise ValueError(f"short string longer than 255 octets: {value[:40]!r}...")
        encoded = bytes((len(raw),)) + raw
        if len(_SHORTSTR_CACHE) >= _SHORTSTR_CACHE_LIMIT:
            _SHORTSTR_CACHE.clear()
        _SHORTSTR_CACHE[value] = encoded
    return encoded


def encode_ack(channel: int, delivery_tag: int, multiple: bool) -> bytes:
    """A whole Basic.Ack frame (publisher confirms)."""
    return _ACK_FRAME.pack(1, channel, 13, ACK, delivery_tag, 1 if multiple else 0, 0xCE)


def encode_nack(channel: int, delivery_tag: int, multiple: bool, requeue: bool = False) -> bytes:
    """A whole Basic.Nack frame (publisher confirms: requeue is meaningless and 0)."""
    bits = (1 if multiple else 0) | (2 if requeue else 0)
    return _ACK_FRAME.pack(1, channel, 13, NACK, delivery_tag, bits, 0xCE)


def _with_content(
    channel: int, method: list[bytes], raw_properties: bytes, body: bytes, frame_max: int
) -> bytes:
    """Method frame parts (without header/end) + content header + body frames, joined once."""
    method_size = sum(len(part) for part in method)
    body_size = len(body)
    parts = [_FRAME_HEADER.pack(1, channel, method_size), *method]
    parts.append(
        _END_THEN_HEADER.pack(0xCE, 2, channel, 12 + len(raw_properties), 60, 0, body_size)
    )
    parts.append(raw_properties)
    chunk = frame_max - FRAME_OVERHEAD
    if body_size == 0:
        parts.append(_END)
    elif body_size <= chunk:
        parts.append(_END_THEN_BODY.pack(0xCE, 3, channel, body_size))
        parts.append(body)
        parts.append(_END)
    else:
        view = memoryview(body)
        for start in range(0, body_size, chunk):
            piece = view[start : start + chunk]
            parts.append(_END_THEN_BODY.pack(0xCE, 3, channel, len(piece)))
            parts.append(piece)  # type: ignore[arg-type]  # join accepts buffers
        parts.append(_END)
    return b"".join(parts)


# A delivery's method frame is the same bytes but for its delivery tag and redelivered bit:
# the consumer tag (with the method id before it) and the exchange + routing key pair are kept
# encoded, so that a delivery is a few ``struct`` packs and one join (issue 16, item 2).
_DELIVER_HEADS: dict[str, bytes] = {}
_ROUTES: dict[tuple[str, str], bytes] = {}


def _deliver_head(consumer_tag: str) -> bytes:
    head = _DELIVER_ID + shortstr(consumer_tag)
    if len(_DELIVER_HEADS) >= _SHORTSTR_CACHE_LIMIT:
        _DELIVER_HEADS.clear()
    _DELIVER_HEADS[consumer_tag] = head
    return head


def _route(exchange: str, routing_key: str) -> bytes:
    route = shortstr(exchange) + shortstr(routing_key)
    if len(_ROUTES) >= _SHORTSTR_CACHE_LIMIT:
        _ROUTES.clear()
    _ROUTES[exchange, routing_key] = route
    return route


def encode_deliver(
    channel: int,
    consumer_tag: str,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Basic.Deliver + content header + body frames as one ``bytes``.

    ``raw_properties`` is the flags + property list (``PublishReceived.header``).
    """
    head = _DELIVER_HEADS.get(consumer_tag) or _deliver_head(consumer_tag)
    route = _ROUTES.get((exchange, routing_key)) or _route(exchange, routing_key)
    tag_bits = _TAG_BITS.pack(delivery_tag, 1 if redelivered else 0)
    body_size = len(body)
    if 0 < body_size <= frame_max - FRAME_OVERHEAD:
        # The common case: one body frame, so one join of all the pieces.
        return b"".join(
            (
                _FRAME_HEADER.pack(1, channel, len(head) + 9 + len(route)),
                head,
                tag_bits,
                route,
                _END_THEN_HEADER.pack(0xCE, 2, channel, 12 + len(raw_properties), 60, 0, body_size),
                raw_properties,
                _END_THEN_BODY.pack(0xCE, 3, channel, body_size),
                body,
                _END,
            )
        )
    return _with_content(channel, [head, tag_bits, route], raw_properties, body, frame_max)


def encode_get_ok(
    channel: int,
    delivery_tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Basic.Get-Ok + content header + body frames as one ``bytes``."""
    method = [
        _GET_OK_ID,
        _TAG_BITS.pack(delivery_tag, 1 if redelivered else 0),
        shortstr(exchange),
        shortstr(routing_key),
        _U32.pack(message_count),
    ]
    return _with_content(channel, method, raw_properties, body, frame_max)


def encode_return(
    channel: int,
    reply_code: int,
    reply_text: str,
    exchange: str,
    routing_key: str,
    raw_properties: bytes,
    body: bytes,
    frame_max: int,
) -> bytes:
    """Basic.Return + content header + body frames as one ``bytes``."""
    method = [
        _RETURN_ID,
        struct.pack(">H", reply_code),
        shortstr(reply_text),
        shortstr(exchange),
        shortstr(routing_key),
    ]
    return _with_content(channel, method, raw_properties, body, frame_max)
