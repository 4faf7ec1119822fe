"""Stream queues' rules: x-stream-offset specs, consume refusals, filters, the offset header,
in RabbitMQ's words (rabbit_stream_queue)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.errors import ChannelError, ConnectionException, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.amqp.properties import MessageProperties, decode_properties, encode_properties
from gateway.model.streams import (
    FIRST,
    LAST,
    NEXT,
    At,
    Since,
    StreamFilter,
    StreamRetention,
    check_stream_consume,
    max_age_ms,
    parse_offset,
    stream_filter,
    stream_retention,
    with_offset_header,
)

WHERE = "queue 's' in vhost '/'"
NOW = 1_700_000_000_000


@pytest.mark.parametrize(
    ("field", "spec"),
    [
        (None, NEXT),
        (Field("S", "first"), FIRST),
        (Field("S", "last"), LAST),
        (Field("S", "next"), NEXT),
        (Field("x", b"first"), FIRST),
        (Field("l", 5000), At(5000)),
        (Field("I", 7), At(7)),
        (Field("b", -3), At(0)),  # before the log: its start
        (Field("T", 1_686_519_750), Since(1_686_519_750_000)),  # AMQP timestamps: seconds
        (Field("S", "1h"), Since(NOW - 3_600_000)),
        (Field("S", "7D"), Since(NOW - 7 * 86_400_000)),
        (Field("S", "1Y"), Since(NOW - 365 * 86_400_000)),
        (Field("S", "2M"), Since(NOW - 60 * 86_400_000)),
    ],
)
def test_offset_specs(field: Field | None, spec: object) -> None:
    assert parse_offset(WHERE, field, NOW) == spec


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        (Field("S", "soon"), "invalid_max_age"),
        (Field("S", "0s"), "invalid_max_age"),
        (Field("S", "10 s"), "invalid_max_age"),
        (Field("t", True), "{invalid_offset_arg,bool}"),
        (Field("d", 1.5), "{invalid_offset_arg,double}"),
    ],
)
def test_bad_offsets(field: Field, reason: str) -> None:
    with pytest.raises(ChannelError) as refused:
        parse_offset(WHERE, field, NOW)
    assert refused.value.reply_code == ReplyCode.PRECONDITION_FAILED
    assert refused.value.reply_text == (
        f"PRECONDITION_FAILED - failed consuming from stream {WHERE}: {reason}"
    )


@given(st.integers(min_value=1, max_value=10**9), st.sampled_from("YMDhms"))
def test_max_age_is_a_count_of_units(count: int, unit: str) -> None:
    ms = max_age_ms(f"{count}{unit}")
    assert ms is not None and ms % 1000 == 0 and ms >= count * 1000


def test_consume_refusals_in_rabbitmqs_order() -> None:
    with pytest.raises(ChannelError) as no_prefetch:
        check_stream_consume(WHERE, no_ack=True, consumer_prefetch=0, channel_prefetch=5)
    assert no_prefetch.value.reply_text == (
        f"PRECONDITION_FAILED - consumer prefetch count is not set for stream {WHERE}"
    )
    with pytest.raises(ConnectionException) as auto_ack:
        check_stream_consume(WHERE, no_ack=True, consumer_prefetch=10, channel_prefetch=5)
    assert (auto_ack.value.reply_code, auto_ack.value.reply_text) == (
        ReplyCode.NOT_IMPLEMENTED,
        f"NOT_IMPLEMENTED - automatic acknowledgement not supported by stream {WHERE}",
    )
    with pytest.raises(ConnectionException) as global_qos:
        check_stream_consume(WHERE, no_ack=False, consumer_prefetch=10, channel_prefetch=5)
    assert global_qos.value.reply_text == f"NOT_IMPLEMENTED - {WHERE} does not support global qos"
    check_stream_consume(WHERE, no_ack=False, consumer_prefetch=10, channel_prefetch=0)


def test_filters() -> None:
    assert stream_filter({}) is None
    assert stream_filter({"x-stream-filter": Field("l", 1)}) is None
    one = stream_filter({"x-stream-filter": Field("S", "ca")})
    assert one == StreamFilter(frozenset({"ca"}), False)
    many = stream_filter(
        {
            "x-stream-filter": Field("A", [Field("S", "ca"), Field("l", 1), Field("S", "tx")]),
            "x-stream-match-unfiltered": Field("t", True),
        }
    )
    assert many == StreamFilter(frozenset({"ca", "tx"}), True)
    assert one.admits({"x-stream-filter-value": Field("S", "ca")})
    assert not one.admits({"x-stream-filter-value": Field("S", "tx")})
    assert not one.admits(None) and many.admits(None) and many.admits({})


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_the_offset_header_is_a_long_added_to_the_others(offset: int) -> None:
    header = encode_properties(
        MessageProperties(content_type="text/plain", headers={"a": Field("S", "b")})
    )
    properties = decode_properties(with_offset_header(header, offset))
    assert properties.content_type == "text/plain"
    assert properties.headers == {"a": Field("S", "b"), "x-stream-offset": Field("l", offset)}


def test_retention() -> None:
    assert stream_retention({}) == StreamRetention(None, None)
    arguments = {"x-max-age": Field("S", "7D"), "x-max-length-bytes": Field("l", 10)}
    assert stream_retention(arguments) == StreamRetention(7 * 86_400_000, 10)
