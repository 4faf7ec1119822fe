"""mixed_read.py: a multiRead of data (with versions) and children, framed and parsed."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.protocol.serialization import (
    MultiHeader,
    int_struct,
    multiheader_struct,
    stat_struct,
    write_buffer,
    write_string,
)

from gateway.metadata.mixed_read import MISSING, MixedRead, Read


def _stat(version: int) -> bytes:
    return stat_struct.pack(1, 2, 3, 4, version, 0, 0, 0, 0, 0, 5)


def _answer(*parts: bytes) -> bytes:
    return b"".join(parts) + multiheader_struct.pack(-1, True, -1)


def test_it_frames_each_read_with_its_kind_and_no_watch() -> None:
    request = MixedRead([(Read.DATA, "/a"), (Read.CHILDREN, "/b")])
    expected = (
        MultiHeader(4, False, -1).serialize()
        + write_string("/a")
        + b"\0"
        + MultiHeader(8, False, -1).serialize()
        + write_string("/b")
        + b"\0"
        + multiheader_struct.pack(-1, True, -1)
    )
    assert bytes(request.serialize()) == expected
    assert request.type == 22 and "2 reads" in repr(request)


def test_it_parses_data_with_versions_children_and_missing_nodes() -> None:
    request = MixedRead([(Read.DATA, "/a"), (Read.CHILDREN, "/b"), (Read.DATA, "/c")])
    answer = _answer(
        MultiHeader(4, False, 0).serialize() + write_buffer(b"xy") + _stat(7),
        MultiHeader(8, False, 0).serialize()
        + int_struct.pack(2)
        + write_string("k1")
        + write_string("k2"),
        MultiHeader(-1, False, -101).serialize() + int_struct.pack(-101),
    )
    assert request.deserialize(answer, 0) == [(b"xy", 7), ["k1", "k2"], MISSING]


def test_another_error_fails_the_whole_request() -> None:
    request = MixedRead([(Read.DATA, "/a")])
    answer = _answer(MultiHeader(-1, False, -102).serialize() + int_struct.pack(-102))
    with pytest.raises(NoAuthError):
        request.deserialize(answer, 0)


def test_a_short_answer_is_refused() -> None:
    request = MixedRead([(Read.DATA, "/a"), (Read.DATA, "/b")])
    answer = _answer(MultiHeader(4, False, 0).serialize() + write_buffer(None) + _stat(0))
    with pytest.raises(ValueError, match="answered 1 of 2"):
        request.deserialize(answer, 0)


@pytest.mark.integration
def test_against_zookeeper(raw: KazooClient, zk_prefix: str) -> None:
    raw.create(f"{zk_prefix}/n/c1", b"", makepath=True)
    raw.set(f"{zk_prefix}/n", b"v")
    request = MixedRead(
        [(Read.DATA, f"{zk_prefix}/n"), (Read.CHILDREN, f"{zk_prefix}/n"), (Read.DATA, "/none")]
    )
    result = raw.handler.async_result()
    raw._call(request, result)
    assert result.get(timeout=10) == [(b"v", 1), ["c1"], MISSING]
