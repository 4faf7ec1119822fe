"""Reply codes and errors, SASL parsing, the frame reader on its own."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, frame

from gateway.amqp.errors import (
    HARD_CODES,
    SOFT_CODES,
    AMQPError,
    ChannelError,
    ConnectionException,
    FrameError,
    ReplyCode,
    amqp_error,
    format_reply_text,
)
from gateway.amqp.fieldtable import Field, encode_table
from gateway.amqp.framing import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    FrameReader,
    body_frames,
    is_protocol_header,
    split_body,
)
from gateway.amqp.sasl import parse_amqplain, parse_plain

# -------------------------------------------------------------------------------- errors


def test_reply_code_table_is_rabbitmqs() -> None:
    assert {int(c) for c in ReplyCode} == SOFT_CODES | HARD_CODES | {200}
    assert not SOFT_CODES & HARD_CODES
    assert ReplyCode.NOT_FOUND.is_soft and not ReplyCode.NOT_FOUND.is_hard
    assert ReplyCode.NOT_IMPLEMENTED.is_hard
    assert ReplyCode.CONNECTION_FORCED.is_hard
    assert ReplyCode.CONTENT_TOO_LARGE.is_soft


def test_reply_text_is_formatted_like_rabbitmq() -> None:
    error = ChannelError(ReplyCode.NOT_FOUND, "no queue 'x' in vhost '/'", 50, 10)
    assert error.reply_text == "NOT_FOUND - no queue 'x' in vhost '/'"
    assert str(error) == error.reply_text
    # Already prefixed: left alone.
    assert format_reply_text(404, "NOT_FOUND - x") == "NOT_FOUND - x"
    assert format_reply_text(200, "Normal shutdown") == "Normal shutdown"
    assert format_reply_text(999, "odd") == "odd"
    assert format_reply_text(406, "") == "PRECONDITION_FAILED"


def test_reply_text_fits_a_short_string() -> None:
    text = format_reply_text(404, "é" * 300)
    assert len(text.encode("utf-8")) <= 255
    text.encode("utf-8")  # still valid UTF-8


def test_error_classes() -> None:
    assert isinstance(amqp_error(404, "x"), ChannelError)
    assert isinstance(amqp_error(504, "x"), ConnectionException)
    assert not issubclass(ConnectionException, ConnectionError)  # no builtin shadowing
    assert AMQPError(404, "x").is_hard is False
    assert AMQPError(541, "x").is_hard is True
    frame_error = FrameError("bad")
    attributed = frame_error.with_method(60, 40)
    assert type(attributed) is FrameError
    assert (attributed.class_id, attributed.method_id) == (60, 40)
    assert attributed.reply_text == "FRAME_ERROR - bad"
    assert attributed.with_method(1, 1) is attributed
    assert AMQPError(404, "x", 1, 2) == AMQPError(404, "x", 1, 2)
    assert "404" in repr(AMQPError(404, "x"))


# ---------------------------------------------------------------------------------- SASL


def test_parse_plain() -> None:
    assert parse_plain(b"\x00guest\x00guest") == ("", "guest", "guest")
    assert parse_plain(b"admin\x00user\x00p\xc3\xa9") == ("admin", "user", "pé")


@pytest.mark.parametrize(
    "response", [b"", b"guest", b"\x00guest", b"a\x00b\x00c\x00d", b"\x00\xff\x00p", b"\x00\x00p"]
)
def test_parse_plain_garbage_is_403(response: bytes) -> None:
    with pytest.raises(AMQPError) as caught:
        parse_plain(response)
    assert caught.value.reply_code == ReplyCode.ACCESS_REFUSED


def test_parse_amqplain_as_py_amqp_sends_it() -> None:
    body = encode_table({"LOGIN": "guest", "PASSWORD": "secret"})[4:]
    assert parse_amqplain(body) == ("guest", "secret")
    binary = encode_table({"LOGIN": Field("S", b"u"), "PASSWORD": Field("S", b"p")})[4:]
    assert parse_amqplain(binary) == ("u", "p")


@pytest.mark.parametrize(
    "response",
    [
        b"garbage",
        encode_table({"LOGIN": "guest"})[4:],
        encode_table({"LOGIN": 1, "PASSWORD": "x"})[4:],
        encode_table({"LOGIN": Field("S", b"\xff"), "PASSWORD": "x"})[4:],
    ],
)
def test_parse_amqplain_garbage_is_403(response: bytes) -> None:
    with pytest.raises(AMQPError) as caught:
        parse_amqplain(response)
    assert caught.value.reply_code == ReplyCode.ACCESS_REFUSED


# ------------------------------------------------------------------------------- framing


def test_protocol_header() -> None:
    assert is_protocol_header(PROTOCOL_HEADER)
    assert is_protocol_header(PROTOCOL_HEADER + b"more")
    assert not is_protocol_header(b"AMQP\x01\x01\x00\x09")
    assert HEARTBEAT_FRAME == b"\x08\x00\x00\x00\x00\x00\x00\xce"


def frames_of(reader: FrameReader) -> list[tuple[int, int, bytes]]:
    out = []
    while (got := reader.next_frame()) is not None:
        out.append(got)
    return out


def test_reader_whole_and_byte_by_byte() -> None:
    data = frame.marshal(commands.Basic.Qos(prefetch_count=3), 5) + HEARTBEAT_FRAME
    whole = FrameReader(4096)
    whole.feed(data)
    expected = frames_of(whole)
    assert [(t, c) for t, c, _p in expected] == [(1, 5), (8, 0)]
    assert whole.buffered == 0
    slow = FrameReader(4096)
    got = []
    for i in range(len(data)):
        slow.feed(data[i : i + 1])
        got += frames_of(slow)
    assert got == expected
    assert all(type(p) is bytes for _t, _c, p in got)


def test_reader_accepts_bytearray_and_memoryview() -> None:
    data = frame.marshal(commands.Basic.Qos(prefetch_count=3), 5)
    for chunk in (bytearray(data), memoryview(data)):
        reader = FrameReader(4096)
        reader.feed(chunk)  # type: ignore[arg-type]
        [(_t, _c, payload)] = frames_of(reader)
        assert type(payload) is bytes


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">BHI", 9, 0, 0), "unknown frame type 9"),
        (struct.pack(">BHI", 1, 0, 4097), "exceeds frame_max"),
        (struct.pack(">BHI", 1, 0, 1) + b"x\x00", "invalid frame end marker 0x00"),
    ],
)
def test_reader_errors(data: bytes, message: str) -> None:
    reader = FrameReader(4096)
    reader.feed(data)
    with pytest.raises(FrameError, match=message):
        reader.next_frame()


def test_body_splitting() -> None:
    assert split_body(b"a" * 10, 12) == [b"aaaa", b"aaaa", b"aa"]
    assert split_body(b"", 12) == []
    assert list(body_frames(1, b"", 4096)) == []
    frames = b"".join(body_frames(1, b"abcdefghij", 12))
    assert frames == b"".join(
        struct.pack(">BHI", 3, 1, len(p)) + p + b"\xce" for p in (b"abcd", b"efgh", b"ij")
    )
