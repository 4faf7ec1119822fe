"""Reading a protobuf message's fields without a schema: the few places the gateway reads
Pulsar's wire format itself (a CONNECT answer, a serialized message id)."""

from __future__ import annotations


def fields(data: bytes) -> dict[int, int | bytes]:
    """The varint and length-delimited fields of one protobuf message by number (the last one
    wins for a repeated field); fixed-width fields are skipped. ValueError if malformed."""
    found: dict[int, int | bytes] = {}
    position = 0

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            if position >= len(data) or shift > 63:
                raise ValueError("truncated varint")
            byte = data[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while position < len(data):
        key = varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            found[number] = varint()
        elif wire_type == 2:
            length = varint()
            if position + length > len(data):
                raise ValueError("truncated field")
            found[number] = data[position : position + length]
            position += length
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
            if position > len(data):
                raise ValueError("truncated field")
        else:
            raise ValueError(f"unexpected wire type {wire_type}")
    return found


def signed(value: int) -> int:
    """A varint of an ``int32``/``int64`` field: negative numbers are 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value
