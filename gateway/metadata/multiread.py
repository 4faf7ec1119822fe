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
    read_buffer,
    stat_struct,
    write_string,
)

__all__ = ["MISSING", "MultiRead"]

MULTI_READ: Final = 22  # ZooDefs.OpCode.multiRead
GET_DATA: Final = 4  # ZooDefs.OpCode.getData
_ERROR: Final = -1
# Stat is czxid, mzxid, ctime, mtime, ...: mtime is the long after three longs.
_MTIME: Final = struct.Struct("!q")
_MTIME_OFFSET: Final = 3 * 8


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


class MultiRead:
    """A kazoo request: ``client._call(MultiRead(paths), async_result)``; the result is a list
    with, per path, its data (``bytes``) or ``MISSING``. Any other per-path error (NoAuth, ...)
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
        results: list[bytes | _Missing] = []
        if self.mtimes is not None:
            self.mtimes = []
        while True:
            header, offset = MultiHeader.deserialize(buffer, offset)
            if header.done:
                break
            if header.type == GET_DATA:
                data, offset = read_buffer(buffer, offset)
                if self.mtimes is not None:
                    self.mtimes.append(_MTIME.unpack_from(buffer, offset + _MTIME_OFFSET)[0])
                offset += stat_struct.size
                results.append(b"" if data is None else bytes(data))
            elif header.type == _ERROR:
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                error: Any = EXCEPTIONS[code]()
                if isinstance(error, NoNodeError):
                    results.append(MISSING)
                    if self.mtimes is not None:
                        self.mtimes.append(None)
                else:
                    raise error
            else:
                raise ValueError(f"unexpected result type {header.type} in a multiRead")
        if len(results) != len(self.paths):
            raise ValueError(f"multiRead answered {len(results)} of {len(self.paths)} reads")
        return results
