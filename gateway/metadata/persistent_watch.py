"""ZooKeeper's persistent recursive watches (3.6+) for kazoo: ``addWatch`` and its events.

A one-shot children watch says only "the children of this node changed", once: the replica
lists the node again (and again after the next change). A persistent recursive watch on a
namespace's node stays in place and reports every change below it as it happens, one event
per node: ``NodeCreated``, ``NodeDeleted`` or ``NodeDataChanged`` with the node's path. A
replica then learns a new binding without a listing (its name says everything) and a new queue
with one read of that node, whatever the size of its bucket.

kazoo 2.11 has neither the request nor the events. The request is like ``multiread.py``'s: an
object with ``type``, ``serialize()`` and ``deserialize(buffer, offset)`` passed to the client's
``_call``. Events arrive like any watch event (the reply header's xid is -1), and kazoo's
connection looks their path up among its one-shot watchers; :class:`WatchingConnection` (which
replaces the client's connection before it starts) first hands events under a registered root
to that root's callback, on the connection thread as it reads them, so that they reach trio in
the server's order together with the answers (kazoo_handler.py). One-shot watchers on the same
path still get theirs: ZooKeeper sends one event per session and path, for both kinds.

The server forgets a connection's watches when the connection ends (kazoo sends no SetWatches
on reconnecting), so the owner adds them again on every reconnect, before listing what it
missed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Watch, int_struct, write_string

__all__ = [
    "ADD_WATCH",
    "CREATED",
    "DATA_CHANGED",
    "DELETED",
    "AddWatch",
    "WatchingConnection",
    "watching_connection",
]

log = logging.getLogger(__name__)

ADD_WATCH: Final = 106  # ZooDefs.OpCode.addWatch
PERSISTENT_RECURSIVE: Final = 1  # AddWatchMode.PERSISTENT_RECURSIVE
# Watcher.Event.EventType: what a persistent recursive watch reports.
CREATED: Final = 1
DELETED: Final = 2
DATA_CHANGED: Final = 3

# (event type, path without the chroot), on kazoo's connection thread: quick, never blocking.
EventCallback = Callable[[int, str], None]


class AddWatch:
    """A kazoo request: ``client._call(AddWatch(path), async_result)`` (``path`` with the
    client's chroot, which kazoo adds only to the requests it knows). Answers True."""

    type = ADD_WATCH

    def __init__(self, path: str, mode: int = PERSISTENT_RECURSIVE) -> None:
        self.path = path
        self.mode = mode

    def __repr__(self) -> str:
        return f"AddWatch({self.path!r}, mode={self.mode})"

    def serialize(self) -> bytearray:
        out = bytearray(write_string(self.path))
        out += int_struct.pack(self.mode)
        return out

    def deserialize(self, buffer: bytes, offset: int) -> bool:
        return True


class WatchingConnection(ConnectionHandler):  # type: ignore[misc]
    """kazoo's connection, handing the events under a persistent watch's root to its
    callback (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Root path (with the chroot, as the server sends it) -> its callback.
        self.persistent: dict[str, EventCallback] = {}

    def _read_watch_event(self, buffer: bytes, offset: int) -> None:
        client = self.client
        path: str = Watch.deserialize(buffer, offset)[0].path
        persistent = self.persistent
        if persistent:
            root = path
            while root:
                callback = persistent.get(root)
                if callback is not None:
                    if not client._stopped.is_set():
                        event_type = int_struct.unpack_from(buffer, offset)[0]
                        try:
                            callback(event_type, client.unchroot(path))
                        except Exception:
                            log.exception("a persistent watch callback failed")
                    break
                root = root.rpartition("/")[0]
        if path in client._data_watchers or path in client._child_watchers:
            super()._read_watch_event(buffer, offset)


def watching_connection(client: Any) -> WatchingConnection:
    """Give a kazoo client (not started yet) a :class:`WatchingConnection`."""
    old = client._connection
    connection = WatchingConnection(
        client, old.retry_sleeper, logger=old.logger, sasl_options=old.sasl_options
    )
    client._connection = connection
    return connection
