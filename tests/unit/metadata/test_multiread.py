"""The multiRead request's wire format (ZooKeeper's MultiOperationRecord / MultiResponse)."""

from __future__ import annotations

import struct

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.protocol.serialization import GetChildren2

from gateway.metadata.multiread import MISSING, Children, MultiRead

STAT = bytes(68)  # a zeroed Stat: 3 longs, 2 longs of times, 3 ints, 1 long, 2 ints, 1 long


def _header(type_: int, done: bool, err: int) -> bytes:
    return struct.pack(">i?i", type_, done, err)


def _data(payload: bytes | None) -> bytes:
    if payload is None:
        return _header(4, False, 0) + struct.pack(">i", -1) + STAT
    return _header(4, False, 0) + struct.pack(">i", len(payload)) + payload + STAT


def _error(code: int) -> bytes:
    return _header(-1, False, code) + struct.pack(">i", code)


END = _header(-1, True, -1)


def test_serialize() -> None:
    request = MultiRead(["/a", "/bc"])
    assert request.type == 22
    assert bytes(request.serialize()) == (
        _header(4, False, -1)
        + b"\x00\x00\x00\x02/a\x00"
        + _header(4, False, -1)
        + b"\x00\x00\x00\x03/bc\x00"
        + END
    )


def test_deserialize_data_missing_and_empty() -> None:
    request = MultiRead(["/a", "/b", "/c"])
    answer = b"xx" + _data(b"hello") + _error(-101) + _data(None) + END
    assert request.deserialize(answer, 2) == [b"hello", MISSING, b""]


def test_other_errors_fail_the_whole_read() -> None:
    with pytest.raises(NoAuthError):
        MultiRead(["/a"]).deserialize(_error(-102) + END, 0)


def test_a_short_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="1 of 2"):
        MultiRead(["/a", "/b"]).deserialize(_data(b"x") + END, 0)


def test_children_reads_as_kazoos_get_children2() -> None:
    request = Children("/a/b")
    assert request.type == GetChildren2.type and request.watcher is None
    assert bytes(request.serialize()) == bytes(GetChildren2("/a/b", None).serialize())
    stat = struct.pack(">qqqqiiiqiiq", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)
    names = ["q-1", "é,x", ""]
    answer = (
        b"xx"
        + struct.pack(">i", len(names))
        + b"".join(struct.pack(">i", len(n.encode())) + n.encode() for n in names)
        + stat
    )
    assert Children.deserialize(answer, 2) == GetChildren2.deserialize(answer, 2)
    children, found = Children.deserialize(answer, 2)
    assert children == names and found.cversion == 6
