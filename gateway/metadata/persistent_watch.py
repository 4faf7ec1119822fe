"""ZooKeeper's persistent recursive watches (3.6+) for kazoo: ``addWatch`` and its events.

A one-shot children watch says only "the children of this node changed", once: the replica
lists the node again (and again after the next change). A persistent recursive watch on a
namespace's node stays in place and reports every change below it as it happens, one event
per node: ``NodeCreated``, ``NodeDeleted`` or ``NodeDataChanged`` with the node's path. A
replica then learns a new binding without a listing (its name says everything) and a new queue
with one read of that node, whatever the size of its bucket.

kazoo 2.11 has neither the request nor the events. The request is like ``multiread.py``'s: an
object with ``type``, ``serialize()`` and ``deserialize(buffer, offset)`` passed to the client's
``_call`` (through kazoo_internals.submit_call). Events arrive like any watch event (the reply
header's xid is -1), and kazoo's connection looks their path up among its one-shot watchers;
:class:`WatchingConnection` (which replaces the client's connection before it starts) first
hands events under a registered root to that root's callback, on the connection thread as it
reads them, so that they reach trio in the server's order together with the answers
(kazoo_handler.py). One-shot watchers on the same path still get theirs: ZooKeeper sends one
event per session and path, for both kinds.

The server forgets a connection's watches when the connection ends (kazoo sends no SetWatches
on reconnecting), so the owner adds them again on every reconnect, before listing what it
missed.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any, Final

from kazoo.exceptions import ConnectionDropped
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import Watch, int_struct, write_string

from gateway.metadata.kazoo_internals import (
    connection_of,
    has_one_shot_watch,
    has_queued_requests,
    is_stopped,
    replace_connection,
)

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

_LENGTH: Final = struct.Struct("!i")
_RECEIVE: Final = 64 * 1024
_SENDS_PER_TURN: Final = 64

# (event type, path without the chroot), on kazoo's connection thread: quick, never blocking.
EventCallback = Callable[[int, str], None]


class AddWatch:
    """A kazoo request: ``submit_call(client, AddWatch(path), async_result)`` (``path`` with the
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
    callback (see the module docstring), and reading and writing with fewer system calls.

    kazoo's own reads a frame as two ``recv`` (its length, then the rest), each after a
    ``select``, and goes round its loop (another ``select``) for every frame and every
    request. Here one ``recv`` takes whatever the socket has (up to 64 KiB), every complete
    frame in it is handled before the loop waits again, every queued request is sent before
    it does, and a ``send`` is tried before waiting for the socket to be writable. (TLS
    connections keep kazoo's reads: an SSL socket may hold decrypted bytes ``select`` does
    not see.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Root path (with the chroot, as the server sends it) -> its callback.
        self.persistent: dict[str, EventCallback] = {}
        # Bytes received and not yet handled (plain TCP only).
        self._received = bytearray()

    def _connect(self, *args: Any, **kwargs: Any) -> Any:
        self._received = bytearray()
        return super()._connect(*args, **kwargs)

    def _read(self, length: int, timeout: float) -> bytes:
        if self.client.use_ssl:
            return bytes(super()._read(length, timeout))
        received = self._received
        with self._socket_error_handling():
            while len(received) < length:
                if not self.handler.select([self._socket], [], [], timeout)[0]:
                    raise self.handler.timeout_exception("socket time-out during read")
                chunk = self._socket.recv(max(_RECEIVE, length - len(received)))
                if not chunk:
                    raise ConnectionDropped("socket connection broken")
                received += chunk
        data = bytes(received[:length])
        del received[:length]
        return data

    def _frame_received(self) -> bool:
        received = self._received
        return len(received) >= 4 and len(received) >= 4 + _LENGTH.unpack_from(received)[0]

    def _read_socket(self, read_timeout: float) -> Any:
        # Every complete frame already received, before waiting again.
        result = super()._read_socket(read_timeout)
        while result is None and self._frame_received():
            result = super()._read_socket(read_timeout)
        return result

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        # Every request queued (up to a bound: answers must not wait for ever), one after
        # the other; each took one wake-up byte, which kazoo's reads one at a time.
        for _ in range(_SENDS_PER_TURN):
            super()._send_request(read_timeout, connect_timeout)
            if not has_queued_requests(self.client):
                break

    def _write(self, msg: bytes, timeout: float) -> None:
        if self.client.use_ssl:
            super()._write(msg, timeout)
            return
        view = memoryview(msg)
        sent = 0
        with self._socket_error_handling():
            while sent < len(view):
                try:
                    count = self._socket.send(view[sent:])
                except BlockingIOError:
                    if not self.handler.select([], [self._socket], [], timeout)[1]:
                        raise self.handler.timeout_exception(
                            "socket time-out during write"
                        ) from None
                    continue
                if not count:
                    raise ConnectionDropped("socket connection broken")
                sent += count

    def _read_watch_event(self, buffer: bytes, offset: int) -> None:
        client = self.client
        path: str = Watch.deserialize(buffer, offset)[0].path
        persistent = self.persistent
        if persistent:
            root = path
            while root:
                callback = persistent.get(root)
                if callback is not None:
                    if not is_stopped(client):
                        event_type = int_struct.unpack_from(buffer, offset)[0]
                        try:
                            callback(event_type, client.unchroot(path))
                        except Exception:
                            log.exception("a persistent watch callback failed")
                    break
                root = root.rpartition("/")[0]
        if has_one_shot_watch(client, path):
            super()._read_watch_event(buffer, offset)


def watching_connection(client: Any) -> WatchingConnection:
    """Give a kazoo client (not started yet) a :class:`WatchingConnection`."""
    old = connection_of(client)
    connection = WatchingConnection(
        client, old.retry_sleeper, logger=old.logger, sasl_options=old.sasl_options
    )
    replace_connection(client, connection)
    return connection
