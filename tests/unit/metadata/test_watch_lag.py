"""The metadata watch lag: from a znode's mtime to the moment the view shows the change."""

from __future__ import annotations

import struct
import time

from gateway.metadata.codec import encode_queue
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.multiread import MultiRead
from gateway.metadata.paths import Folder, bucket_of, encode_name
from gateway.metadata.watch_lag import lag_seconds
from gateway.model.entities import Queue

Q = Folder.QUEUES


def test_lag_is_the_time_from_the_mtime_to_now() -> None:
    assert lag_seconds(1_700_000_000_000, now=1_700_000_000.25) == 0.25
    assert lag_seconds(1_700_000_000_500, now=1_700_000_003.0) == 2.5


def test_a_clock_behind_zookeepers_gives_zero_not_a_negative_lag() -> None:
    assert lag_seconds(1_700_000_001_000, now=1_700_000_000.0) == 0.0


def test_now_defaults_to_the_wall_clock() -> None:
    mtime = int(time.time() * 1000) - 2_000
    lag = lag_seconds(mtime)
    assert 2.0 <= lag < 60.0


def _stat(mtime: int) -> bytes:
    # czxid, mzxid, ctime, mtime, version, cversion, aversion, ephemeralOwner, dataLength,
    # numChildren, pzxid
    return struct.pack("!qqqqiiiqiiq", 11, 12, 13, mtime, 1, 2, 3, 0, 5, 0, 14)


def _get_data(payload: bytes, mtime: int) -> bytes:
    header = struct.pack(">i?i", 4, False, 0)
    return header + struct.pack(">i", len(payload)) + payload + _stat(mtime)


MISSING_ANSWER = struct.pack(">i?i", -1, False, -101) + struct.pack(">i", -101)
END = struct.pack(">i?i", -1, True, -1)


def test_a_multiread_keeps_each_nodes_mtime_when_asked() -> None:
    request = MultiRead(["/a", "/b", "/c"], mtimes=True)
    answer = _get_data(b"x", 1_000) + MISSING_ANSWER + _get_data(b"yz", 2_000) + END
    assert request.deserialize(answer, 0)[0] == b"x"
    assert request.mtimes == [1_000, None, 2_000]


def test_a_multiread_keeps_no_mtimes_by_default() -> None:
    request = MultiRead(["/a"])
    assert request.deserialize(_get_data(b"x", 1_000) + END, 0) == [b"x"]
    assert request.mtimes is None


def test_only_a_read_that_changes_the_view_counts_as_seen() -> None:
    mirror = NamespaceMirror("t/n")
    child = encode_name("q")
    bucket = bucket_of(child)
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=1) == [child]
    assert mirror.apply_data(Q, child, encode_queue(Queue("q"))) is True
    # The same data read again (a suspicious listing re-reads every child): nothing new.
    assert mirror.apply_data(Q, child, encode_queue(Queue("q"))) is False
    # Replaced by another replica (other owner): new again.
    replaced = encode_queue(Queue("q", exclusive=True, owner="c2"))
    assert mirror.apply_data(Q, child, replaced) is True
    # Gone when read, or no longer listed: nothing seen.
    assert mirror.apply_data(Q, child, None) is False
    assert mirror.apply_data(Q, encode_name("other"), encode_queue(Queue("other"))) is False
