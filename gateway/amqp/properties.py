"""Basic content properties: the property list of a content header, exactly as sent.

A content header frame's payload is ``class-id(2) weight(2) body-size(8) property-flags
property-list`` (AMQP 0-9-1 §4.2.6.1). The gateway keeps the *raw* ``property-flags
property-list`` bytes of every published message (``PublishReceived.header``) and replays them
unchanged on delivery: no decode/encode round trip can then alter a value (see NOTES, "pamqp 4
on the server side"), and copying bytes is much cheaper than decoding them. When something
needs a value (the mapping to Pulsar properties, the headers exchange), ``decode_properties``
turns the same bytes into a ``MessageProperties`` whose headers keep their AMQP types.

``validate_properties`` is the cheap structural check run on every publish, so that a
malformed header is refused when it arrives (502) and never reaches a consumer.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass, fields
from typing import Any

from pamqp import commands

from gateway.amqp.fieldtable import (
    Field,
    FieldDecodeError,
    Table,
    decode_table,
    encode_table,
    skip_table,
    table_from_plain,
    table_to_plain,
)
from gateway.bounded import remember

__all__ = [
    "PROPERTY_FLAGS",
    "MessageProperties",
    "decode_properties",
    "encode_properties",
    "header_payload",
    "validate_properties",
]

ShortStr = str | bytes

# (attribute, wire type, flag bit) in wire order; bit 15 is the first property.
_SHORTSTR, _OCTET, _TABLE, _TIMESTAMP = 0, 1, 2, 3
_SPEC: tuple[tuple[str, int, int], ...] = (
    ("content_type", _SHORTSTR, 1 << 15),
    ("content_encoding", _SHORTSTR, 1 << 14),
    ("headers", _TABLE, 1 << 13),
    ("delivery_mode", _OCTET, 1 << 12),
    ("priority", _OCTET, 1 << 11),
    ("correlation_id", _SHORTSTR, 1 << 10),
    ("reply_to", _SHORTSTR, 1 << 9),
    ("expiration", _SHORTSTR, 1 << 8),
    ("message_id", _SHORTSTR, 1 << 7),
    ("timestamp", _TIMESTAMP, 1 << 6),
    ("type", _SHORTSTR, 1 << 5),
    ("user_id", _SHORTSTR, 1 << 4),
    ("app_id", _SHORTSTR, 1 << 3),
    ("cluster_id", _SHORTSTR, 1 << 2),
)
PROPERTY_FLAGS: dict[str, int] = {name: flag for name, _kind, flag in _SPEC}
_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_HEADER_PREFIX = struct.Struct(">HHQ")


@dataclass(frozen=True)
class MessageProperties:
    """The fourteen Basic properties; ``None`` means "absent" (flag bit clear).

    Short strings are ``str`` when they are valid UTF-8 and ``bytes`` otherwise (RabbitMQ
    treats them as binaries, so a client may send anything). ``timestamp`` is the raw 64-bit
    seconds value. ``headers`` keeps each value's AMQP type (``fieldtable.Field``); use
    ``headers_plain()`` for pamqp-style plain values. The attribute is ``type`` as in the spec
    (pamqp calls it ``message_type``).
    """

    content_type: ShortStr | None = None
    content_encoding: ShortStr | None = None
    headers: Table | None = None
    delivery_mode: int | None = None
    priority: int | None = None
    correlation_id: ShortStr | None = None
    reply_to: ShortStr | None = None
    expiration: ShortStr | None = None
    message_id: ShortStr | None = None
    timestamp: int | None = None
    type: ShortStr | None = None
    user_id: ShortStr | None = None
    app_id: ShortStr | None = None
    cluster_id: ShortStr | None = None

    def headers_plain(self) -> dict[str, Any] | None:
        return None if self.headers is None else table_to_plain(self.headers)

    def to_pamqp(self) -> commands.Basic.Properties:
        """A pamqp object for code that wants one; lossy (see docs/protocol.md)."""
        props = commands.Basic.Properties()
        for name, _kind, _flag in _SPEC:
            value = getattr(self, name)
            if value is None:
                continue  # keep pamqp's defaults (cluster_id is "" there, not None)
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            if name == "headers":
                value = table_to_plain(value)
            elif name == "timestamp":
                value = datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
            setattr(props, "message_type" if name == "type" else name, value)
        return props

    @classmethod
    def from_pamqp(cls, props: commands.Basic.Properties) -> MessageProperties:
        values: dict[str, Any] = {}
        for name, _kind, _flag in _SPEC:
            value = getattr(props, "message_type" if name == "type" else name, None)
            if value == "":
                # pamqp treats "" as absent (it never sends an empty property); so do we here.
                value = None
            elif name == "headers" and value is not None:
                value = table_from_plain(value)
            elif name == "timestamp" and isinstance(value, datetime.datetime):
                if value.tzinfo is None:
                    value = value.replace(tzinfo=datetime.UTC)
                value = int(value.timestamp())
            values[name] = value
        return cls(**values)


def _shortstr(raw: bytes) -> ShortStr:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _read_flags(raw: bytes) -> tuple[int, int]:
    """Return (flags of the first word, offset of the property list).

    Continuation words (bit 0 set) are allowed by the spec for classes with more than 14
    properties; Basic has 14, so any property bit in a continuation word is an error.
    """
    if len(raw) < 2:
        raise FieldDecodeError("content header has no property flags")
    (flags,) = _U16.unpack_from(raw, 0)
    offset = 2
    word = flags
    while word & 1:
        if offset + 2 > len(raw):
            raise FieldDecodeError("truncated property flags")
        (word,) = _U16.unpack_from(raw, offset)
        offset += 2
        if word & 0xFFFE:
            raise FieldDecodeError("property flag set beyond the 14 Basic properties")
    return flags, offset


# flags word → wire types of the properties present, in order (few distinct combinations
# occur in practice, so this stays small; bounded anyway).
_LAYOUTS: dict[int, tuple[int, ...]] = {}


def _layout(flags: int) -> tuple[int, ...]:
    layout = _LAYOUTS.get(flags)
    if layout is None:
        layout = tuple(kind for _name, kind, flag in _SPEC if flags & flag)
        if len(_LAYOUTS) < 4096:
            _LAYOUTS[flags] = layout
    return layout


def validate_properties(raw: bytes) -> None:
    """Check that ``raw`` (flags + property list) is well formed; raise FieldDecodeError.

    Runs on every publish, so it only walks lengths, and remembers the small headers it
    accepted (applications send the same few again and again); ``decode_properties`` cannot
    fail on what this accepts (checked by tests/unit/amqp/test_fuzz.py).
    """
    if raw in _valid_headers:
        return
    _check_properties(raw)
    if len(raw) <= _VALID_HEADER_MAX:
        remember(_valid_headers, raw, None, _VALID_HEADERS)


_valid_headers: dict[bytes, None] = {}
_VALID_HEADERS = 1024
_VALID_HEADER_MAX = 256


def _check_properties(raw: bytes) -> None:
    end = len(raw)
    if end >= 2 and not raw[1] & 1:
        offset = 2
        flags = (raw[0] << 8) | raw[1]
    else:
        flags, offset = _read_flags(raw)
    for kind in _layout(flags):
        if kind == _SHORTSTR:
            if offset >= end:
                raise FieldDecodeError("truncated short string property")
            offset += 1 + raw[offset]
        elif kind == _OCTET:
            offset += 1
        elif kind == _TIMESTAMP:
            offset += 8
        else:
            offset = skip_table(raw, offset, end)
    if offset != end:
        raise FieldDecodeError(
            "property list is truncated"
            if offset > end
            else "trailing bytes after the property list"
        )


def decode_properties(raw: bytes) -> MessageProperties:
    """Decode flags + property list; raise FieldDecodeError on malformed input."""
    flags, offset = _read_flags(raw)
    end = len(raw)
    values: dict[str, Any] = {}
    for name, kind, flag in _SPEC:
        if not flags & flag:
            continue
        if kind == _SHORTSTR:
            if offset >= end:
                raise FieldDecodeError("truncated short string property")
            stop = offset + 1 + raw[offset]
            if stop > end:
                raise FieldDecodeError("short string property runs past the header")
            values[name] = _shortstr(bytes(raw[offset + 1 : stop]))
            offset = stop
        elif kind == _OCTET:
            if offset >= end:
                raise FieldDecodeError("truncated octet property")
            values[name] = raw[offset]
            offset += 1
        elif kind == _TIMESTAMP:
            if offset + 8 > end:
                raise FieldDecodeError("truncated timestamp property")
            values[name] = _U64.unpack_from(raw, offset)[0]
            offset += 8
        else:
            values[name], offset = decode_table(raw, offset, end)
    if offset != end:
        raise FieldDecodeError("trailing bytes after the property list")
    # MessageProperties(**values) minus the frozen dataclass's 14 object.__setattr__ calls.
    props = _new_object(MessageProperties)
    props.__dict__.update(_ALL_ABSENT)
    props.__dict__.update(values)
    return props


def encode_properties(props: MessageProperties) -> bytes:
    """Flags + property list. An empty string is *present* (flag set), unlike in pamqp."""
    flags = 0
    parts: list[bytes] = []
    for name, kind, flag in _SPEC:
        value = getattr(props, name)
        if value is None:
            continue
        flags |= flag
        if kind == _SHORTSTR:
            encoded = value.encode("utf-8") if isinstance(value, str) else bytes(value)
            if len(encoded) > 255:
                raise ValueError(f"property {name} is longer than 255 octets")
            parts.append(bytes((len(encoded),)) + encoded)
        elif kind == _OCTET:
            parts.append(bytes((value,)))
        elif kind == _TIMESTAMP:
            parts.append(_U64.pack(value))
        else:
            parts.append(encode_table(value))
    return _U16.pack(flags) + b"".join(parts)


def header_payload(body_size: int, raw_properties: bytes) -> bytes:
    """A Basic content header frame payload around already-encoded properties."""
    return _HEADER_PREFIX.pack(60, 0, body_size) + raw_properties


# Field names in declaration order, for tests and for callers building from dicts.
PROPERTY_NAMES: tuple[str, ...] = tuple(f.name for f in fields(MessageProperties))
_ALL_ABSENT: dict[str, None] = dict.fromkeys(PROPERTY_NAMES)
_new_object = object.__new__

__all__ += ["PROPERTY_NAMES", "Field"]
