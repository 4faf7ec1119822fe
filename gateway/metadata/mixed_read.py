"""ZooKeeper's multiRead (3.6+) with both of its kinds of reads: a node's data *with its
version*, and a node's children, for kazoo.

``multiread.py`` reads data only (the load's and the watcher's reads); the group commit
(zookeeper/group_commit.py) sends every read of a turn of trio in one request, whatever
its kind: a delete's version and listings, a consumer registration's read of the queue, the
binder's read of a topic key. The request is framed like kazoo's ``Transaction``
(``MultiHeader`` + record per operation, then a closing header); a getChildren answer carries
no Stat (ZooKeeper's ``GetChildrenResponse``).

Like any multiRead it is not atomic, but one request: ZooKeeper serves its reads in order, one
after the other, on one server, after every earlier request of the session.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final

from kazoo.exceptions import EXCEPTIONS, NoNodeError
from kazoo.protocol.serialization import (
    MultiHeader,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)

from gateway.metadata.multiread import GET_DATA, MISSING, MULTI_READ

__all__ = ["MISSING", "MixedRead", "Read"]

_GET_CHILDREN: Final = 8  # ZooDefs.OpCode.getChildren
_ERROR: Final = -1
# Stat: czxid, mzxid, ctime, mtime (longs), then version (an int).
_VERSION_OFFSET: Final = 4 * 8


class Read(enum.Enum):
    """What to read of a node: its data and version, or its children."""

    DATA = GET_DATA
    CHILDREN = _GET_CHILDREN


class MixedRead:
    """A kazoo request: ``submit_call(client, MixedRead(reads), async_result)``; the result has, per
    read, ``(data, version)`` for ``Read.DATA``, the list of names for ``Read.CHILDREN``, or
    ``MISSING`` (no such node). Any other per-read error (NoAuth, ...) is raised for the
    whole request."""

    type = MULTI_READ

    def __init__(self, reads: Sequence[tuple[Read, str]]) -> None:
        self.reads = list(reads)

    def __repr__(self) -> str:
        return f"MixedRead({len(self.reads)} reads)"

    def serialize(self) -> bytearray:
        out = bytearray()
        for kind, path in self.reads:
            out += MultiHeader(kind.value, False, -1).serialize()
            out += write_string(path)
            out.append(0)  # no watch
        out += multiheader_struct.pack(-1, True, -1)
        return out

    def deserialize(self, buffer: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        while True:
            header, offset = MultiHeader.deserialize(buffer, offset)
            if header.done:
                break
            if header.type == GET_DATA:
                data, offset = read_buffer(buffer, offset)
                version = int_struct.unpack_from(buffer, offset + _VERSION_OFFSET)[0]
                offset += stat_struct.size
                results.append((b"" if data is None else bytes(data), version))
            elif header.type == _GET_CHILDREN:
                count = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                children = []
                for _ in range(max(count, 0)):
                    child, offset = read_string(buffer, offset)
                    children.append(child)
                results.append(children)
            elif header.type == _ERROR:
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                error: Any = EXCEPTIONS[code]()
                if not isinstance(error, NoNodeError):
                    raise error
                results.append(MISSING)
            else:
                raise ValueError(f"unexpected result type {header.type} in a multiRead")
        if len(results) != len(self.reads):
            raise ValueError(f"multiRead answered {len(results)} of {len(self.reads)} reads")
        return results
