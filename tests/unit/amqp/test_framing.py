"""The frame reader on its own, the protocol header, and body splitting."""

from __future__ import annotations

import struct

import pytest
from pamqp import commands, frame

from gateway.amqp.errors import FrameError
from gateway.amqp.framing import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    FrameReader,
    body_frames,
    is_protocol_header,
    split_body,
)


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
