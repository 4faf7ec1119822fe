"""Method codec: every method round-trips, against pamqp and against itself."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import base, commands, frame

from gateway.amqp.codec import (
    CLIENT_METHODS,
    SPECS,
    MethodSpec,
    decode_method,
    encode_method,
    make_method,
    method_name,
)
from gateway.amqp.errors import AMQPError, ReplyCode
from tests.unit.amqp.strategies import pamqp_names, plain_tables, utf8_text

pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated:DeprecationWarning")

ALL_SPECS = sorted(SPECS.values(), key=lambda s: (s.class_id, s.method_id))


def values_for(spec: MethodSpec, *, pamqp_compatible: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Random arguments for a method; ``pamqp_compatible`` keeps to what pamqp can marshal."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for attr, kind in spec.fields:
        if kind == "bit":
            fields[attr] = st.booleans()
        elif kind == "octet":
            fields[attr] = st.integers(0, 255)
        elif kind == "short":
            fields[attr] = st.integers(0, 2**16 - 1)
        elif kind == "long":
            fields[attr] = st.integers(0, 2**32 - 1)
        elif kind == "longlong":
            # pamqp packs longlong as *signed*; the spec (and we) say unsigned.
            fields[attr] = st.integers(0, 2**63 - 1 if pamqp_compatible else 2**64 - 1)
        elif kind == "shortstr":
            fields[attr] = pamqp_names() if pamqp_compatible else utf8_text()
        elif kind == "longstr":
            # pamqp can only marshal str into a longstr (binary SASL responses fail).
            fields[attr] = utf8_text(64) if pamqp_compatible else st.binary(max_size=64)
        elif kind == "table":
            fields[attr] = plain_tables()
        else:  # pragma: no cover
            raise AssertionError(kind)
    if pamqp_compatible:
        # pamqp's validate() insists on these deprecated fields' fixed values.
        for attr, value in (
            ("ticket", 0),
            ("insist", False),
            ("capabilities", ""),
            ("known_hosts", ""),
            ("cluster_id", ""),
            ("out_of_band", "0"),
            ("channel_id", "0"),
        ):
            if attr in fields:
                fields[attr] = st.just(value)
    return st.fixed_dictionaries(fields)


@st.composite
def methods(draw: st.DrawFn, *, pamqp_compatible: bool) -> base.Frame:
    spec = draw(st.sampled_from(ALL_SPECS))
    return make_method(spec.cls, **draw(values_for(spec, pamqp_compatible=pamqp_compatible)))


def fields_of(method: base.Frame) -> dict[str, Any]:
    out = {}
    for attr, value in method:
        if isinstance(value, str) and SPECS_BY_CLS[type(method)].fields_dict[attr] == "longstr":
            value = value.encode("utf-8")  # pamqp decodes longstr to str when it can
        if isinstance(value, bytearray):
            value = bytes(value)
        out[attr] = value
    return out


class _Info:
    def __init__(self, spec: MethodSpec) -> None:
        self.fields_dict = dict(spec.fields)


SPECS_BY_CLS = {spec.cls: _Info(spec) for spec in ALL_SPECS}


def pamqp_payload(method: base.Frame) -> bytes:
    return struct.pack(">I", method.index) + method.marshal()


def pamqp_decode(payload: bytes) -> base.Frame:
    _consumed, _channel, value = frame.unmarshal(
        struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce"
    )
    return value  # type: ignore[return-value]


@settings(max_examples=300, deadline=None)
@given(methods(pamqp_compatible=True))
def test_decoding_pamqp_output_matches_pamqp(method: base.Frame) -> None:
    payload = pamqp_payload(method)
    ours = decode_method(payload)
    assert type(ours) is type(method)
    assert fields_of(ours) == fields_of(pamqp_decode(payload))


@settings(max_examples=300, deadline=None)
@given(methods(pamqp_compatible=True))
def test_pamqp_decodes_our_output(method: base.Frame) -> None:
    theirs = pamqp_decode(encode_method(method))
    assert type(theirs) is type(method)
    assert fields_of(theirs) == fields_of(method)


@settings(max_examples=300, deadline=None)
@given(methods(pamqp_compatible=True))
def test_byte_identical_to_pamqp_without_tables(method: base.Frame) -> None:
    spec = SPECS_BY_CLS[type(method)]
    if "table" in spec.fields_dict.values():
        # pamqp sorts keys and picks the narrowest integer type; we keep order and use I/l.
        for attr, kind in spec.fields_dict.items():
            if kind == "table":
                setattr(method, attr, {})
    assert encode_method(method) == pamqp_payload(method)


@settings(max_examples=300, deadline=None)
@given(methods(pamqp_compatible=False))
def test_round_trip_through_our_codec(method: base.Frame) -> None:
    assert fields_of(decode_method(encode_method(method))) == fields_of(method)


def test_every_method_is_covered() -> None:
    assert len(SPECS) == len(commands.INDEX_MAPPING) == 64
    assert method_name(commands.Basic.GetOk) == "basic.get_ok"
    assert method_name(commands.Connection.UpdateSecretOk()) == "connection.update_secret_ok"
    assert commands.Basic.Publish in CLIENT_METHODS
    assert commands.Basic.Deliver not in CLIENT_METHODS


def test_make_method_accepts_names_pamqp_refuses() -> None:
    with pytest.raises(ValueError, match="Invalid value for queue"):
        commands.Queue.DeclareOk(queue="ünïcode queue!", message_count=0, consumer_count=0)
    method = make_method(commands.Queue.DeclareOk, queue="ünïcode queue!")
    decoded = decode_method(encode_method(method))
    assert (decoded.queue, decoded.message_count, decoded.consumer_count) == (
        "ünïcode queue!",
        0,
        0,
    )
    with pytest.raises(TypeError, match="no field"):
        make_method(commands.Queue.DeclareOk, nonsense=1)


def test_unknown_method_is_540() -> None:
    with pytest.raises(AMQPError) as caught:
        decode_method(struct.pack(">HH", 60, 999))
    assert caught.value.reply_code == ReplyCode.NOT_IMPLEMENTED
    assert (caught.value.class_id, caught.value.method_id) == (60, 999)


def test_pamqp_silently_truncates_a_short_string_we_do_not() -> None:
    # Basic.Cancel-Ok: consumer tag claims 10 octets, has 3.
    payload = struct.pack(">I", 0x003C001F) + b"\x0aabc"
    assert pamqp_decode(payload).consumer_tag == "abc"  # pamqp: accepted, truncated
    with pytest.raises(AMQPError) as caught:
        decode_method(payload)
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR


def test_pamqp_reads_unsigned_longlong_as_signed() -> None:
    payload = struct.pack(">IQB", 0x003C0050, 2**64 - 1, 0)
    assert pamqp_decode(payload).delivery_tag == -1
    assert decode_method(payload).delivery_tag == 2**64 - 1


def test_longstr_stays_bytes() -> None:
    payload = encode_method(
        make_method(commands.Connection.StartOk, response=b"\x00u\x00\xff", mechanism="PLAIN")
    )
    assert decode_method(payload).response == b"\x00u\x00\xff"
