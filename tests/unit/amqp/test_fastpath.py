"""The struct fast paths are byte-identical to pamqp and decode to the same values."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import body, commands, frame, header

from gateway.amqp.codec import decode_method
from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.amqp.fastpath import (
    decode_ack,
    decode_content_header,
    decode_nack,
    decode_publish,
    decode_reject,
    encode_ack,
    encode_deliver,
    encode_get_ok,
    encode_nack,
    encode_return,
    shortstr,
)
from tests.unit.amqp.strategies import pamqp_names, utf8_text

FRAME_MAX = 4096
tags = st.integers(0, 2**63 - 1)  # pamqp packs longlong signed
channels = st.integers(1, 65535)


def pamqp_properties() -> st.SearchStrategy[commands.Basic.Properties]:
    text = st.none() | pamqp_names(60)
    return st.builds(
        commands.Basic.Properties,
        content_type=text,
        content_encoding=text,
        headers=st.none()
        | st.dictionaries(pamqp_names(10), st.integers(-(2**31), 2**31 - 1) | utf8_text(20)),
        delivery_mode=st.none() | st.sampled_from([1, 2]),
        priority=st.none() | st.integers(0, 9),
        correlation_id=text,
        reply_to=text,
        expiration=text,
        message_id=text,
        message_type=text,
        user_id=text,
        app_id=text,
    )


def pamqp_content(channel: int, props: commands.Basic.Properties, payload: bytes) -> bytes:
    out = frame.marshal(header.ContentHeader(0, len(payload), props), channel)
    for start in range(0, len(payload), FRAME_MAX - 8):
        out += frame.marshal(body.ContentBody(payload[start : start + FRAME_MAX - 8]), channel)
    return out


@settings(max_examples=300, deadline=None)
@given(pamqp_names(), utf8_text(), st.booleans(), st.booleans())
def test_decode_publish_matches_pamqp(
    exchange: str, routing_key: str, mandatory: bool, immediate: bool
) -> None:
    method = commands.Basic.Publish(
        exchange=exchange, routing_key=routing_key, mandatory=mandatory, immediate=immediate
    )
    payload = struct.pack(">I", method.index) + method.marshal()
    assert decode_publish(payload) == (exchange, routing_key, mandatory, immediate)
    theirs = decode_method(payload)
    assert (theirs.exchange, theirs.routing_key, theirs.mandatory, theirs.immediate) == (
        exchange,
        routing_key,
        mandatory,
        immediate,
    )


@settings(max_examples=300, deadline=None)
@given(pamqp_properties(), st.integers(0, 2**63 - 1))
def test_decode_content_header_matches_pamqp(
    props: commands.Basic.Properties, body_size: int
) -> None:
    payload = header.ContentHeader(0, body_size, props).marshal()
    class_id, weight, size, raw = decode_content_header(payload)
    assert (class_id, weight, size) == (60, 0, body_size)
    assert raw == props.marshal()


@settings(max_examples=300, deadline=None)
@given(channels, tags, st.booleans(), st.booleans())
def test_acks_match_pamqp(channel: int, tag: int, multiple: bool, requeue: bool) -> None:
    ack = commands.Basic.Ack(delivery_tag=tag, multiple=multiple)
    nack = commands.Basic.Nack(delivery_tag=tag, multiple=multiple, requeue=requeue)
    reject = commands.Basic.Reject(delivery_tag=tag, requeue=requeue)
    assert encode_ack(channel, tag, multiple) == frame.marshal(ack, channel)
    assert encode_nack(channel, tag, multiple, requeue) == frame.marshal(nack, channel)
    assert decode_ack(frame.marshal(ack, channel)[7:-1]) == (tag, multiple)
    assert decode_nack(frame.marshal(nack, channel)[7:-1]) == (tag, multiple, requeue)
    assert decode_reject(frame.marshal(reject, channel)[7:-1]) == (tag, requeue)


@settings(max_examples=300, deadline=None)
@given(
    channels,
    pamqp_names(),
    tags,
    st.booleans(),
    pamqp_names(),
    utf8_text(),
    pamqp_properties(),
    st.binary(min_size=1, max_size=3 * FRAME_MAX),
)
def test_deliver_is_byte_identical_to_pamqp(
    channel: int,
    consumer_tag: str,
    tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    props: commands.Basic.Properties,
    payload: bytes,
) -> None:
    expected = frame.marshal(
        commands.Basic.Deliver(
            consumer_tag=consumer_tag,
            delivery_tag=tag,
            redelivered=redelivered,
            exchange=exchange,
            routing_key=routing_key,
        ),
        channel,
    ) + pamqp_content(channel, props, payload)
    ours = encode_deliver(
        channel,
        consumer_tag,
        tag,
        redelivered,
        exchange,
        routing_key,
        props.marshal(),
        payload,
        FRAME_MAX,
    )
    assert ours == expected


@settings(max_examples=200, deadline=None)
@given(
    channels,
    tags,
    st.booleans(),
    pamqp_names(),
    utf8_text(),
    st.integers(0, 2**32 - 1),
    pamqp_properties(),
    st.binary(min_size=1, max_size=2 * FRAME_MAX),
)
def test_get_ok_is_byte_identical_to_pamqp(
    channel: int,
    tag: int,
    redelivered: bool,
    exchange: str,
    routing_key: str,
    message_count: int,
    props: commands.Basic.Properties,
    payload: bytes,
) -> None:
    expected = frame.marshal(
        commands.Basic.GetOk(
            delivery_tag=tag,
            redelivered=redelivered,
            exchange=exchange,
            routing_key=routing_key,
            message_count=message_count,
        ),
        channel,
    ) + pamqp_content(channel, props, payload)
    ours = encode_get_ok(
        channel,
        tag,
        redelivered,
        exchange,
        routing_key,
        message_count,
        props.marshal(),
        payload,
        FRAME_MAX,
    )
    assert ours == expected


@settings(max_examples=200, deadline=None)
@given(
    channels,
    st.sampled_from([312, 313]),
    utf8_text(),
    pamqp_names(),
    utf8_text(),
    pamqp_properties(),
    st.binary(min_size=1, max_size=2 * FRAME_MAX),
)
def test_return_is_byte_identical_to_pamqp(
    channel: int,
    code: int,
    text: str,
    exchange: str,
    routing_key: str,
    props: commands.Basic.Properties,
    payload: bytes,
) -> None:
    expected = frame.marshal(
        commands.Basic.Return(
            reply_code=code, reply_text=text, exchange=exchange, routing_key=routing_key
        ),
        channel,
    ) + pamqp_content(channel, props, payload)
    ours = encode_return(
        channel, code, text, exchange, routing_key, props.marshal(), payload, FRAME_MAX
    )
    assert ours == expected


def test_empty_body_has_no_body_frame() -> None:
    data = encode_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"", FRAME_MAX)
    expected = frame.marshal(
        commands.Basic.Deliver(consumer_tag="c", delivery_tag=1, routing_key="q"), 1
    ) + frame.marshal(header.ContentHeader(0, 0), 1)
    assert data == expected


def test_body_of_exactly_one_frame_and_one_more_octet() -> None:
    one = encode_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"a" * (FRAME_MAX - 8), FRAME_MAX)
    assert one.count(b"\x03\x00\x01") == 1
    two = encode_deliver(1, "c", 1, False, "", "q", b"\x00\x00", b"a" * (FRAME_MAX - 7), FRAME_MAX)
    assert two.endswith(b"\x03\x00\x01\x00\x00\x00\x01a\xce")


def test_names_pamqp_would_refuse_are_sent() -> None:
    with pytest.raises(ValueError, match="Invalid value for exchange"):
        commands.Basic.Deliver(consumer_tag="c", delivery_tag=1, exchange="é!", routing_key="q")
    data = encode_deliver(1, "c", 1, False, "é!", "q", b"\x00\x00", b"x", FRAME_MAX)
    _n, _ch, deliver = frame.unmarshal(data)
    assert deliver.exchange == "é!"


def test_publish_errors() -> None:
    with pytest.raises(AMQPError) as caught:
        decode_publish(struct.pack(">IH", 0x003C0028, 0) + b"\x00\x00\x00\x00")
    assert caught.value.reply_code == ReplyCode.FRAME_ERROR
    with pytest.raises(AMQPError) as caught:
        decode_publish(struct.pack(">IH", 0x003C0028, 0) + b"\x01\xc3\x00\x00")
    assert caught.value.reply_code == ReplyCode.SYNTAX_ERROR


def test_shortstr_limit() -> None:
    assert shortstr("é") == b"\x02\xc3\xa9"
    with pytest.raises(ValueError, match="255"):
        shortstr("x" * 256)
