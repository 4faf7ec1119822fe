"""ZooKeeper's multiRead (3.6+): many getData reads in one request, for kazoo.

kazoo sends one request per loop of its connection thread and pays a fresh selector per
select call, so it manages about 1,600 pipelined reads a second: loading 100,000 queues one
``get`` at a time takes a minute. A multiRead of 500 paths is one request and one response,
and the same load takes about a second. kazoo has no multiRead, but its connection accepts any
request object with ``type``, ``serialize()`` and ``deserialize(buffer, offset)``, framed like
its ``Transaction`` (``MultiHeader`` + record per operation, then a closing header).

Unlike a transaction, a multiRead is not atomic and a failed read does not fail the others:
each result is the node's data or ``MISSING`` (no such node).

Each answer also carries the node's Stat; with ``mtimes=True`` the request keeps each node's
``mtime`` (ms since the epoch, the ZooKeeper server's clock at the node's last write), which
the store uses for the metadata watch lag. One ``unpack_from`` per node, done only when asked.

``Children`` is kazoo's getChildren2 (children and the parent's Stat, no watch) with a
faster parser, for the listings of a load.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, Final

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import (
    MultiHeader,
    int_struct,
    multiheader_struct,
    stat_struct,
    write_string,
)
from kazoo.protocol.states import ZnodeStat

__all__ = ["MISSING", "Children", "MultiRead"]

MULTI_READ: Final = 22  # ZooDefs.OpCode.multiRead
GET_DATA: Final = 4  # ZooDefs.OpCode.getData
_ERROR: Final = -1
# Stat is czxid, mzxid, ctime, mtime, ...: mtime is the long after three longs.
_MTIME: Final = struct.Struct("!q")
_MTIME_OFFSET: Final = 3 * 8


_HEADER_SIZE: Final = multiheader_struct.size
GET_CHILDREN2: Final = 12  # ZooDefs.OpCode.getChildren2


class Children:
    """kazoo's ``get_children(path, include_data=True)`` without a watch, parsed faster: a
    kazoo request (``submit_call(client, Children(path), async_result)``) whose result is
    ``(children, ZnodeStat)``. kazoo's GetChildren2 reads each name with ``read_string`` (a
    call and a tuple per name); the buckets of a million-queue vhost hold two million."""

    type = GET_CHILDREN2
    watcher = None

    def __init__(self, path: str) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f"Children({self.path!r})"

    def serialize(self) -> bytearray:
        out = bytearray(write_string(self.path))
        out.append(0)  # no watch
        return out

    @staticmethod
    def deserialize(buffer: bytes, offset: int) -> tuple[list[str], ZnodeStat]:
        length_of = int_struct.unpack_from
        (count,) = length_of(buffer, offset)
        offset += 4
        children: list[str] = []
        append = children.append
        for _ in range(max(0, count)):
            (length,) = length_of(buffer, offset)
            offset += 4
            append(buffer[offset : offset + length].decode("utf-8"))
            offset += length
        return children, ZnodeStat._make(stat_struct.unpack_from(buffer, offset))


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


class MultiRead:
    """A kazoo request: ``submit_call(client, MultiRead(paths), async_result)``; the result is a
    list with, per path, its data (``bytes``) or ``MISSING``. Any other per-path error (NoAuth, ...)
    is raised for the whole request.

    With ``mtimes=True``, :attr:`mtimes` holds, after the answer, each path's Stat mtime (None
    where the node was missing)."""

    type = MULTI_READ

    def __init__(self, paths: Sequence[str], *, mtimes: bool = False) -> None:
        self.paths = list(paths)
        self.mtimes: list[int | None] | None = [] if mtimes else None

    def __repr__(self) -> str:
        return f"MultiRead({len(self.paths)} paths)"

    def serialize(self) -> bytearray:
        out = bytearray()
        header = MultiHeader(GET_DATA, False, -1).serialize()
        for path in self.paths:
            out += header
            out += write_string(path)
            out.append(0)  # no watch
        out += multiheader_struct.pack(-1, True, -1)
        return out

    def deserialize(self, buffer: bytes, offset: int) -> list[bytes | _Missing]:
        # One unpack per header and per length, no tuple per read: a million-queue load
        # parses a million of these answers (kazoo's MultiHeader.deserialize and
        # read_buffer cost twice as much).
        results: list[bytes | _Missing] = []
        mtimes: list[int | None] | None = None if self.mtimes is None else []
        self.mtimes = mtimes
        header = multiheader_struct.unpack_from
        length_of = int_struct.unpack_from
        stat_size = stat_struct.size
        while True:
            kind, done, _error = header(buffer, offset)
            offset += _HEADER_SIZE
            if done:
                break
            if kind == GET_DATA:
                (length,) = length_of(buffer, offset)
                offset += 4
                if length < 0:
                    results.append(b"")
                else:
                    results.append(bytes(buffer[offset : offset + length]))
                    offset += length
                if mtimes is not None:
                    mtimes.append(_MTIME.unpack_from(buffer, offset + _MTIME_OFFSET)[0])
                offset += stat_size
            elif kind == _ERROR:
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                error: Any = EXCEPTIONS[code]()
                if isinstance(error, NoNodeError):
                    results.append(MISSING)
                    if mtimes is not None:
                        mtimes.append(None)
                else:
                    raise error
            else:
                raise ValueError(f"unexpected result type {kind} in a multiRead")
        if len(results) != len(self.paths):
            raise ValueError(f"multiRead answered {len(results)} of {len(self.paths)} reads")
        return results
