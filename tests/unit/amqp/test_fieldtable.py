"""Typed field tables: exact round trips, and the pamqp gaps they close."""

from __future__ import annotations

import contextlib
import datetime
import struct
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import decode as pamqp_decode
from pamqp import encode as pamqp_encode

from gateway.amqp.fieldtable import (
    Field,
    FieldDecodeError,
    decode_table,
    encode_table,
    field_from_plain,
    skip_table,
    table_from_plain,
    table_to_plain,
)
from tests.unit.amqp.strategies import plain_tables, tables


@settings(max_examples=400, deadline=None)
@given(tables())
def test_typed_round_trip_is_exact(table: dict[str, Field]) -> None:
    raw = encode_table(table)
    decoded, end = decode_table(raw)
    assert end == len(raw)
    assert skip_table(raw, 0, len(raw)) == len(raw)
    assert decoded == table
    assert encode_table(decoded) == raw  # and byte-for-byte


@settings(max_examples=300, deadline=None)
@given(plain_tables())
def test_plain_values_read_the_same_as_pamqp(table: dict[str, Any]) -> None:
    # What pamqp encodes, we decode to what pamqp decodes ...
    raw = pamqp_encode.field_table(table)
    ours, _end = decode_table(raw)
    assert table_to_plain(ours) == pamqp_decode.field_table(raw)[1]
    # ... and what we encode from plain values, pamqp decodes to the same values.
    assert pamqp_decode.field_table(encode_table(table))[1] == table


@pytest.mark.parametrize(
    ("field", "pamqp_reencodes_as"),
    [
        (Field("B", 200), b"s"),  # unsigned octet comes back as a signed short
        (Field("I", 70000), b"I"),  # control: pamqp keeps what it would have chosen
        (Field("u", 1), b"b"),
        (Field("i", 5), b"b"),  # unsigned 32-bit comes back as a signed octet
        (Field("d", 0.1), b"f"),  # a double comes back as a 32-bit float
        (Field("l", 5), b"b"),
    ],
)
def test_pamqp_loses_wire_types_we_keep_them(field: Field, pamqp_reencodes_as: bytes) -> None:
    raw = encode_table({"k": field})
    reencoded = pamqp_encode.field_table(pamqp_decode.field_table(raw)[1])
    assert reencoded[6:7] == pamqp_reencodes_as  # 4 length + 1 key length + 1 key
    assert decode_table(raw)[0] == {"k": field}
    assert encode_table(decode_table(raw)[0]) == raw


def test_pamqp_double_round_trip_loses_precision() -> None:
    raw = encode_table({"k": Field("d", 0.1)})
    value = pamqp_decode.field_table(pamqp_encode.field_table(pamqp_decode.field_table(raw)[1]))
    assert value[1]["k"] != 0.1
    assert decode_table(raw)[0]["k"].value == 0.1


def test_non_utf8_long_string() -> None:
    raw = encode_table({"k": Field("S", b"\xff\xfe")})
    plain = pamqp_decode.field_table(raw)[1]
    assert plain == {"k": b"\xff\xfe"}
    with pytest.raises(TypeError):
        pamqp_encode.field_table(plain)  # pamqp cannot send back what it received
    table, _end = decode_table(raw)
    assert table == {"k": Field("S", b"\xff\xfe")}
    assert encode_table(table) == raw


def test_big_timestamps_are_not_milliseconds() -> None:
    seconds = 2**33
    raw = encode_table({"t": Field("T", seconds)})
    # pamqp guesses that anything past 2106 is milliseconds.
    assert pamqp_decode.field_table(raw)[1]["t"].year == 1970
    assert decode_table(raw)[0]["t"] == Field("T", seconds)


def test_key_order_is_kept() -> None:
    table = {"b": Field("I", 1), "a": Field("I", 2)}
    raw = encode_table(table)
    assert list(decode_table(raw)[0]) == ["b", "a"]
    assert list(pamqp_decode.field_table(pamqp_encode.field_table(table_to_plain(table)))[1]) == [
        "a",
        "b",
    ]


def test_non_utf8_key_round_trips() -> None:
    raw = struct.pack(">I", 4) + b"\x02\xff\xfeV"
    table, _ = decode_table(raw)
    assert encode_table(table) == raw


def test_decimal_keeps_its_scale() -> None:
    raw = encode_table({"d": Field("D", Decimal("1.50"))})
    assert raw.endswith(b"D\x02\x00\x00\x00\x96")
    assert str(decode_table(raw)[0]["d"].value) == "1.50"
    assert encode_table({"d": Field("D", Decimal("-3E+2"))}).endswith(b"D\x00\xff\xff\xfe\xd4")
    with pytest.raises(ValueError, match="decimal"):
        encode_table({"d": Field("D", Decimal("NaN"))})
    with pytest.raises(ValueError, match="decimal"):
        encode_table({"d": Field("D", Decimal(2**40))})


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (True, "t"),
        (1, "I"),
        (-(2**31), "I"),
        (2**31, "l"),
        (1.5, "d"),
        (Decimal("1.1"), "D"),
        ("s", "S"),
        (b"b", "x"),
        (bytearray(b"b"), "x"),
        (None, "V"),
        ([1], "A"),
        ({"a": 1}, "F"),
        (datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC), "T"),
    ],
)
def test_types_picked_for_plain_values(value: Any, kind: str) -> None:
    assert field_from_plain(value).kind == kind


def test_plain_conversions() -> None:
    table = table_from_plain({"when": datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)})
    assert table["when"] == Field("T", 1577836800)
    assert table_to_plain(table)["when"] == datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    assert table_to_plain({"t": Field("T", 2**63)}) == {"t": 2**63}
    with pytest.raises(ValueError, match="64-bit"):
        field_from_plain(2**64)
    with pytest.raises(TypeError):
        field_from_plain(object())


@pytest.mark.parametrize(
    "field",
    [Field("b", 128), Field("B", -1), Field("I", True), Field("x", None), Field("?", 1)],
)
def test_encode_refuses_values_outside_their_type(field: Field) -> None:
    with pytest.raises((ValueError, TypeError)):
        encode_table({"k": field})


@pytest.mark.parametrize(
    "raw",
    [
        b"\x00\x00\x00",  # truncated length
        struct.pack(">I", 5) + b"\x01a",  # table longer than the data
        struct.pack(">I", 3) + b"\x05abc",  # key longer than the table
        struct.pack(">I", 2) + b"\x01a",  # no type
        struct.pack(">I", 3) + b"\x01aZ",  # unknown type
        struct.pack(">I", 4) + b"\x01aI\x00",  # truncated int
        struct.pack(">I", 8) + b"\x01aS\x00\x00\x00\x09",  # string longer than the table
        struct.pack(">I", 8) + b"\x01aA\x00\x00\x00\x09",  # array longer than the table
        struct.pack(">I", 9) + b"\x01aA\x00\x00\x00\x01Z",  # bad type inside an array
    ],
)
def test_malformed_tables(raw: bytes) -> None:
    with pytest.raises(FieldDecodeError):
        decode_table(raw)
    with pytest.raises(FieldDecodeError):
        skip_table(raw, 0, len(raw))


@given(st.binary(max_size=64))
def test_decode_never_raises_anything_else(raw: bytes) -> None:
    with contextlib.suppress(FieldDecodeError):
        decode_table(raw)
