"""Field tables and arrays that keep every AMQP type exactly.

pamqp decodes a table into plain Python values and picks the types again when it encodes, so
a round trip through it changes the wire types: ``B``/``u``/``i`` come back as the smallest
*signed* width that fits, ``d`` doubles come back as ``f`` floats (losing precision), keys are
re-sorted, ``T`` timestamps above 2^32 are read as milliseconds, and a non-UTF-8 ``S`` value
decodes to ``bytes`` that pamqp then refuses to encode. The gateway must carry every header
through Pulsar and back with its AMQP type intact (DESIGN "The mapping"), so this module
decodes into ``Field(kind, value)`` pairs that remember the one-letter type tag and encodes
them back byte-for-byte.

Type tags are RabbitMQ's (its errata to the 0-9-1 spec, which every client follows): ``t``
boolean, ``b``/``B`` signed/unsigned 8-bit, ``s``/``u`` signed/unsigned 16-bit, ``I``/``i``
signed/unsigned 32-bit, ``l`` signed 64-bit, ``f`` float, ``d`` double, ``D`` decimal, ``S``
long string, ``x`` byte array, ``A`` array, ``T`` timestamp, ``F`` table, ``V`` void. ``L``
(unsigned 64-bit in the original 0-9-1 grammar, absent from RabbitMQ's) is accepted too.

Decoding is strict where pamqp is lax: a string or table whose declared length runs past the
data is an error here (pamqp silently truncates), and nesting depth is bounded so that a frame
of ``F``\\s cannot exhaust the stack.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any, NamedTuple

__all__ = [
    "MAX_DEPTH",
    "Field",
    "FieldDecodeError",
    "Table",
    "decode_array",
    "decode_table",
    "encode_table",
    "encode_value",
    "field_from_plain",
    "field_to_plain",
    "skip_table",
    "table_from_plain",
    "table_to_plain",
]

# Tables nest (F inside F, A inside A); a real application never goes this deep.
MAX_DEPTH = 64


class FieldDecodeError(ValueError):
    """The bytes are not a well-formed field table/value."""


class Field(NamedTuple):
    """One AMQP field value and its wire type (a NamedTuple: cheap to build per header).

    ``value`` is: ``bool`` for ``t``; ``int`` for the integer tags and for ``T`` (seconds since
    the epoch, exactly as sent); ``float`` for ``f``/``d``; ``Decimal`` for ``D`` (its exponent
    is the wire scale); ``str`` for ``S`` when it is valid UTF-8, else ``bytes``; ``bytes`` for
    ``x``; ``None`` for ``V``; ``list[Field]`` for ``A``; ``dict[str, Field]`` for ``F``.
    """

    kind: str
    value: Any


Table = dict[str, Field]

_INT_STRUCTS: dict[str, struct.Struct] = {
    "b": struct.Struct(">b"),
    "B": struct.Struct(">B"),
    "s": struct.Struct(">h"),
    "u": struct.Struct(">H"),
    "I": struct.Struct(">i"),
    "i": struct.Struct(">I"),
    "l": struct.Struct(">q"),
    "L": struct.Struct(">Q"),
    "T": struct.Struct(">Q"),
}
_FLOAT_STRUCTS: dict[str, struct.Struct] = {"f": struct.Struct(">f"), "d": struct.Struct(">d")}
# Every type decoded as one number (the timestamp "T" as its seconds).
_NUMBER_STRUCTS: dict[str, struct.Struct] = {**_INT_STRUCTS, **_FLOAT_STRUCTS}
# Octets taken by the fixed-size types, for the structural skip.
_FIXED_SIZES: dict[int, int] = {
    ord("t"): 1,
    ord("b"): 1,
    ord("B"): 1,
    ord("s"): 2,
    ord("u"): 2,
    ord("I"): 4,
    ord("i"): 4,
    ord("l"): 8,
    ord("L"): 8,
    ord("T"): 8,
    ord("f"): 4,
    ord("d"): 8,
    ord("D"): 5,
    ord("V"): 0,
}
_LONG = struct.Struct(">I")
_DECIMAL = struct.Struct(">Bi")
_INT_RANGES: dict[str, tuple[int, int]] = {
    "b": (-(1 << 7), (1 << 7) - 1),
    "B": (0, (1 << 8) - 1),
    "s": (-(1 << 15), (1 << 15) - 1),
    "u": (0, (1 << 16) - 1),
    "I": (-(1 << 31), (1 << 31) - 1),
    "i": (0, (1 << 32) - 1),
    "l": (-(1 << 63), (1 << 63) - 1),
    "L": (0, (1 << 64) - 1),
    "T": (0, (1 << 64) - 1),
}


# --------------------------------------------------------------------------------- decoding


def _decode_key(raw: bytes) -> str:
    # Keys are shortstrs: RabbitMQ treats them as binaries. surrogateescape keeps a
    # non-UTF-8 key round-trippable (encode_table uses the same handler).
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape")


def _read_long(buf: bytes, offset: int, end: int) -> int:
    if offset + 4 > end:
        raise FieldDecodeError("truncated length")
    (length,) = _LONG.unpack_from(buf, offset)
    return int(length)


def _container(buf: bytes, offset: int, end: int, what: str) -> tuple[int, int]:
    """Where the table or array (``what``) whose long length is at ``offset`` starts and
    stops; FieldDecodeError if it runs past ``end``."""
    start = offset + 4
    stop = start + _read_long(buf, offset, end)
    if stop > end:
        raise FieldDecodeError(f"{what} runs past the end of its container")
    return start, stop


def decode_value(buf: bytes, offset: int, end: int, depth: int = 0) -> tuple[Field, int]:
    """Decode one tagged value at ``offset``; return it and the offset after it."""
    if offset >= end:
        raise FieldDecodeError("missing field type")
    kind = chr(buf[offset])
    offset += 1
    number_struct = _NUMBER_STRUCTS.get(kind)
    if number_struct is not None:
        stop = offset + number_struct.size
        if stop > end:
            raise FieldDecodeError(f"truncated {kind!r} value")
        return Field(kind, number_struct.unpack_from(buf, offset)[0]), stop
    if kind == "S" or kind == "x":
        length = _read_long(buf, offset, end)
        start = offset + 4
        stop = start + length
        if stop > end:
            raise FieldDecodeError(f"{kind!r} value runs past the end of its table")
        raw = bytes(buf[start:stop])
        if kind == "S":
            try:
                return Field("S", raw.decode("utf-8")), stop
            except UnicodeDecodeError:
                return Field("S", raw), stop
        return Field("x", raw), stop
    if kind == "t":
        if offset + 1 > end:
            raise FieldDecodeError("truncated 't' value")
        return Field("t", buf[offset] != 0), offset + 1
    if kind == "D":
        if offset + 5 > end:
            raise FieldDecodeError("truncated 'D' value")
        scale, unscaled = _DECIMAL.unpack_from(buf, offset)
        # Built from text so that no decimal context rounds it and the exponent is the scale.
        return Field("D", Decimal(f"{unscaled}E-{scale}")), offset + 5
    if kind == "V":
        return Field("V", None), offset
    if kind == "F":
        if depth >= MAX_DEPTH:
            raise FieldDecodeError("tables nested too deeply")
        table, stop = decode_table(buf, offset, end, depth + 1)
        return Field("F", table), stop
    if kind == "A":
        if depth >= MAX_DEPTH:
            raise FieldDecodeError("arrays nested too deeply")
        array, stop = decode_array(buf, offset, end, depth + 1)
        return Field("A", array), stop
    raise FieldDecodeError(f"unknown field type {kind!r}")


def decode_table(
    buf: bytes, offset: int = 0, end: int | None = None, depth: int = 0
) -> tuple[Table, int]:
    """Decode a length-prefixed table at ``offset``; return it and the offset after it.

    Duplicate keys are undefined behaviour in the spec; the last one wins, as in RabbitMQ's
    lookups.
    """
    if end is None:
        end = len(buf)
    offset, stop = _container(buf, offset, end, "table")
    return decode_table_body(buf, offset, stop, depth), stop


def decode_table_body(buf: bytes, offset: int, stop: int, depth: int = 0) -> Table:
    """Decode the entries of a table that occupy exactly ``buf[offset:stop]``."""
    table: Table = {}
    while offset < stop:
        key_length = buf[offset]
        key_start = offset + 1
        key_stop = key_start + key_length
        if key_stop > stop:
            raise FieldDecodeError("table key runs past the end of its table")
        key = _decode_key(bytes(buf[key_start:key_stop]))
        value, offset = decode_value(buf, key_stop, stop, depth)
        table[key] = value
    return table


def decode_array(
    buf: bytes, offset: int = 0, end: int | None = None, depth: int = 0
) -> tuple[list[Field], int]:
    if end is None:
        end = len(buf)
    offset, stop = _container(buf, offset, end, "array")
    items: list[Field] = []
    while offset < stop:
        value, offset = decode_value(buf, offset, stop, depth)
        items.append(value)
    return items, stop


def skip_table(buf: bytes, offset: int, end: int, depth: int = 0) -> int:
    """Check a table's structure without building it; return the offset after it.

    This is what the publish hot path runs: after it succeeds, ``decode_table`` on the same
    bytes cannot fail, so the properties can be decoded lazily without a late protocol error.
    """
    offset, stop = _container(buf, offset, end, "table")
    while offset < stop:
        offset += 1 + buf[offset]
        if offset > stop:
            raise FieldDecodeError("table key runs past the end of its table")
        offset = _skip_value(buf, offset, stop, depth)
    return stop


def _skip_value(buf: bytes, offset: int, end: int, depth: int) -> int:
    if offset >= end:
        raise FieldDecodeError("missing field type")
    tag = buf[offset]
    offset += 1
    size = _FIXED_SIZES.get(tag)
    if size is not None:
        offset += size
        if offset > end:
            raise FieldDecodeError(f"truncated {chr(tag)!r} value")
        return offset
    if tag == 0x53 or tag == 0x78:  # S, x
        stop = offset + 4 + _read_long(buf, offset, end)
        if stop > end:
            raise FieldDecodeError(f"{chr(tag)!r} value runs past the end of its table")
        return stop
    if depth >= MAX_DEPTH:
        raise FieldDecodeError("tables nested too deeply")
    if tag == 0x46:  # F
        return skip_table(buf, offset, end, depth + 1)
    if tag == 0x41:  # A
        offset, stop = _container(buf, offset, end, "array")
        while offset < stop:
            offset = _skip_value(buf, offset, stop, depth + 1)
        return stop
    raise FieldDecodeError(f"unknown field type {chr(tag)!r}")


# --------------------------------------------------------------------------------- encoding


def encode_value(value: Field | Any) -> bytes:
    """Encode one tagged value; a bare Python value gets a type from ``field_from_plain``."""
    field = value if isinstance(value, Field) else field_from_plain(value)
    kind, v = field.kind, field.value
    int_struct = _INT_STRUCTS.get(kind)
    if int_struct is not None:
        if isinstance(v, datetime.datetime) and kind == "T":
            v = _datetime_to_seconds(v)
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{kind!r} needs an int, not {type(v).__name__}")
        low, high = _INT_RANGES[kind]
        if not low <= v <= high:
            raise ValueError(f"{v} does not fit AMQP type {kind!r}")
        return kind.encode() + int_struct.pack(v)
    if kind == "S" or kind == "x":
        raw = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if len(raw) > 0xFFFFFFFF:
            raise ValueError("long string longer than 2^32-1 octets")
        return kind.encode() + _LONG.pack(len(raw)) + raw
    if kind == "t":
        return b"t\x01" if v else b"t\x00"
    float_struct = _FLOAT_STRUCTS.get(kind)
    if float_struct is not None:
        return kind.encode() + float_struct.pack(float(v))
    if kind == "D":
        return b"D" + _encode_decimal(v)
    if kind == "V":
        return b"V"
    if kind == "F":
        return b"F" + encode_table(v)
    if kind == "A":
        return b"A" + encode_array(v)
    raise ValueError(f"unknown field type {kind!r}")


def encode_table(table: Mapping[str, Field | Any] | None) -> bytes:
    """Encode a table, keeping the key order given (pamqp sorts; order is not significant)."""
    if not table:
        return b"\x00\x00\x00\x00"
    parts: list[bytes] = []
    for key, value in table.items():
        raw_key = key.encode("utf-8", "surrogateescape")
        if len(raw_key) > 255:
            raise ValueError(f"table key longer than 255 octets: {key[:40]!r}...")
        parts.append(bytes((len(raw_key),)))
        parts.append(raw_key)
        parts.append(encode_value(value))
    body = b"".join(parts)
    return _LONG.pack(len(body)) + body


def encode_array(items: Iterable[Field | Any]) -> bytes:
    body = b"".join(encode_value(item) for item in items)
    return _LONG.pack(len(body)) + body


def _encode_decimal(value: Any) -> bytes:
    if not isinstance(value, Decimal):
        raise TypeError(f"'D' needs a Decimal, not {type(value).__name__}")
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError(f"{value} cannot be encoded as an AMQP decimal")
    unscaled = int("".join(map(str, digits)) or "0")
    if exponent > 0:
        unscaled *= 10**exponent
        exponent = 0
    if sign:
        unscaled = -unscaled
    scale = -exponent
    if scale > 255 or not -(1 << 31) <= unscaled < (1 << 31):
        raise ValueError(f"{value} does not fit an AMQP decimal (scale octet, int32 value)")
    return _DECIMAL.pack(scale, unscaled)


def _datetime_to_seconds(value: datetime.datetime) -> int:
    if value.tzinfo is None:
        # A naive datetime is taken as UTC, as pamqp does.
        value = value.replace(tzinfo=datetime.UTC)
    return int(value.timestamp())


# ------------------------------------------------------------------------ plain conversions


def field_from_plain(value: Any) -> Field:
    """Pick an AMQP type for a plain Python value.

    The choices are what RabbitMQ and its Java client produce for the same values, so that a
    header set by a native application reads the same as one set through AMQP: ``bool`` → t,
    ``int`` → I when it fits 32 bits else l, ``float`` → d, ``Decimal`` → D, ``str`` → S,
    ``bytes``/``bytearray`` → x, ``datetime`` → T, ``None`` → V, ``list``/``tuple`` → A,
    mappings → F.
    """
    if isinstance(value, Field):
        return value
    if isinstance(value, bool):
        return Field("t", value)
    if isinstance(value, int):
        if -(1 << 31) <= value < (1 << 31):
            return Field("I", value)
        if -(1 << 63) <= value < (1 << 63):
            return Field("l", value)
        raise ValueError(f"integer {value} does not fit a 64-bit signed AMQP long")
    if isinstance(value, float):
        return Field("d", value)
    if isinstance(value, Decimal):
        return Field("D", value)
    if isinstance(value, str):
        return Field("S", value)
    if isinstance(value, bytes | bytearray | memoryview):
        return Field("x", bytes(value))
    if isinstance(value, datetime.datetime):
        return Field("T", _datetime_to_seconds(value))
    if value is None:
        return Field("V", None)
    if isinstance(value, list | tuple):
        return Field("A", [field_from_plain(item) for item in value])
    if isinstance(value, Mapping):
        return Field("F", table_from_plain(value))
    raise TypeError(f"no AMQP field type for {type(value).__name__}")


def table_from_plain(table: Mapping[str, Any]) -> Table:
    return {key: field_from_plain(value) for key, value in table.items()}


def field_to_plain(field: Field) -> Any:
    """The plain Python value pamqp would have produced (types are forgotten).

    ``T`` becomes an aware UTC ``datetime`` (an ``int`` if out of datetime's range); ``x`` and
    non-UTF-8 ``S`` become ``bytes``.
    """
    kind = field.kind
    if kind == "F":
        return table_to_plain(field.value)
    if kind == "A":
        return [field_to_plain(item) for item in field.value]
    if kind == "T":
        try:
            return datetime.datetime.fromtimestamp(field.value, tz=datetime.UTC)
        except (OverflowError, OSError, ValueError):
            return field.value
    return field.value


def table_to_plain(table: Mapping[str, Field]) -> dict[str, Any]:
    return {key: field_to_plain(value) for key, value in table.items()}
