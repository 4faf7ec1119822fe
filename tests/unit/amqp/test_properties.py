"""Content properties: exact round trips, agreement with pamqp, structural validation."""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from gateway.amqp.fieldtable import Field, FieldDecodeError
from gateway.amqp.properties import (
    PROPERTY_FLAGS,
    MessageProperties,
    decode_properties,
    encode_properties,
    header_payload,
    validate_properties,
)
from tests.unit.amqp.strategies import message_properties, pamqp_names, plain_tables


@settings(max_examples=400, deadline=None)
@given(message_properties())
def test_round_trip_is_exact(props: MessageProperties) -> None:
    raw = encode_properties(props)
    validate_properties(raw)
    assert decode_properties(raw) == props
    assert encode_properties(decode_properties(raw)) == raw


def pamqp_props() -> st.SearchStrategy[commands.Basic.Properties]:
    text = st.none() | pamqp_names(50).filter(bool)
    return st.builds(
        commands.Basic.Properties,
        content_type=text,
        content_encoding=text,
        headers=st.none() | plain_tables(),
        delivery_mode=st.none() | st.sampled_from([1, 2]),
        priority=st.none() | st.integers(0, 255),
        correlation_id=text,
        reply_to=text,
        expiration=text,
        message_id=text,
        timestamp=st.none()
        | st.integers(0, 2**32 - 1).map(
            lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC)
        ),
        message_type=text,
        user_id=text,
        app_id=text,
    )


@settings(max_examples=300, deadline=None)
@given(pamqp_props())
def test_decodes_what_pamqp_encodes(props: commands.Basic.Properties) -> None:
    raw = props.marshal()
    validate_properties(raw)
    ours = decode_properties(raw)
    # Back to pamqp's own object: the same values.
    assert ours.to_pamqp() == props
    assert MessageProperties.from_pamqp(props).to_pamqp() == props


@settings(max_examples=300, deadline=None)
@given(pamqp_props())
def test_encoding_without_headers_is_byte_identical_to_pamqp(
    props: commands.Basic.Properties,
) -> None:
    props.headers = None
    assert encode_properties(MessageProperties.from_pamqp(props)) == props.marshal()


def test_empty_string_is_present_for_us_and_absent_for_pamqp() -> None:
    raw = encode_properties(MessageProperties(content_type=""))
    assert raw == b"\x80\x00\x00"
    assert decode_properties(raw).content_type == ""
    assert commands.Basic.Properties(content_type="").marshal() == b"\x00\x00"


def test_non_utf8_short_strings_are_kept_as_bytes() -> None:
    raw = struct.pack(">H", PROPERTY_FLAGS["message_id"]) + b"\x02\xff\xfe"
    props = decode_properties(raw)
    assert props.message_id == b"\xff\xfe"
    assert encode_properties(props) == raw
    assert props.to_pamqp().message_id == "\ufffd\ufffd"  # pamqp's side is lossy


def test_timestamp_is_raw_seconds() -> None:
    props = MessageProperties(timestamp=2**40)
    assert decode_properties(encode_properties(props)).timestamp == 2**40


def test_headers_keep_types() -> None:
    props = MessageProperties(headers={"n": Field("B", 7), "s": Field("S", "x")})
    raw = encode_properties(props)
    decoded = decode_properties(raw)
    assert decoded.headers == {"n": Field("B", 7), "s": Field("S", "x")}
    assert decoded.headers_plain() == {"n": 7, "s": "x"}


def test_header_payload() -> None:
    assert header_payload(5, b"\x00\x00") == b"\x00\x3c\x00\x00" + struct.pack(">Q", 5) + b"\0\0"


def test_continuation_flag_words() -> None:
    # A continuation word with no property bits is legal (and pointless).
    validate_properties(b"\x80\x01\x00\x00\x01a")
    assert decode_properties(b"\x80\x01\x00\x00\x01a").content_type == "a"


@pytest.mark.parametrize(
    "raw",
    [
        b"",  # no flags
        b"\x80",  # truncated flags
        b"\x80\x00",  # content_type flagged but absent
        b"\x80\x00\x05ab",  # short string past the end
        b"\x00\x00extra",  # trailing bytes
        b"\x00\x01",  # continuation word missing
        b"\x00\x01\x80\x00",  # property bits in a continuation word
        b"\x20\x00\x00\x00\x00\x05\x01aZ\x00\x00",  # bad table
        b"\x00\x40\x00\x00",  # truncated timestamp
        b"\x10\x00",  # delivery_mode missing
    ],
)
def test_malformed_property_lists(raw: bytes) -> None:
    with pytest.raises(FieldDecodeError):
        validate_properties(raw)
    with pytest.raises(FieldDecodeError):
        decode_properties(raw)


def test_encode_refuses_long_short_strings() -> None:
    with pytest.raises(ValueError, match="255"):
        encode_properties(MessageProperties(app_id="x" * 256))
