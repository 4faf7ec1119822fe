"""Every replica's AMQP connections and their consumers, and closing a connection from any
replica: what the management API's ``/api/connections``, ``/api/channels``,
``/api/consumers`` and ``/api/nodes`` need fleet-wide (docs/management.md).

Layout, next to the entity metadata (docs/metadata.md)::

    <prefix>/replicas/<replica>                     EPHEMERAL {"v":1,"node":...,"info":{...}}
    <prefix>/connections/<replica>/<connection>     EPHEMERAL {"v":1,"info":{...}}
    <prefix>/connection-consumers/<replica>/<connection>#<page>
                                                    EPHEMERAL {"v":1,"connection":{...},
                                                               "consumers":[{...},...]}
    <prefix>/connection-closes/<replica>/<connection>
                                                    EPHEMERAL (of the asker's session)
                                                    {"v":1,"reason":"...","user":"..."}

- A replica writes its own records only: ``run`` compares what its connections say now with
  what it last wrote, every ``interval`` seconds, and creates, replaces or deletes records in
  one transaction per batch. Records are ephemeral: they go with the replica's session, so a
  dead replica's connections vanish from every listing once its session times out.
- **Consumers** are written the same way, in records of their own (not in the connection's):
  only a connection that has consumers has any, a consumer that comes and goes within a round
  costs nothing, a round writes a connection's consumers once however many changed, and a
  connection's record is not rewritten (nor read by ``/api/connections``) for its consumers.
  A connection's consumers are split into pages of at most ``PAGE_BYTES`` of JSON
  (``#0``, ``#1``, ...), far below ZooKeeper's 1 MB limit, however many it has.
- **Closing a connection of another replica**: the asker creates a request node under the
  owner's ``connection-closes`` folder and waits (a watch) until it is gone. The owner watches
  that folder, closes the connection (Connection.Close 320 and the reason, as
  ``rabbitmqctl close_connection`` and ``DELETE /api/connections/{name}``), then deletes the
  request. The request is ephemeral of the *asker's* session, so an asker that dies leaves
  nothing behind; a request for a connection that is already gone is deleted as done. A folder
  whose replica has no node any more and that is empty is removed by whoever lists it.
- ``info`` is opaque here: the management API's JSON of the connection (``/api/connections``'
  shape), made by the replica that holds the connection; so are a consumers record's
  ``connection`` (what its consumers' ``channel_details`` need) and its ``consumers``.

The directory stands on its own ZooKeeper session (``KazooSession``, as the permission store),
so its ephemeral nodes are not tied to the metadata store's.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from kazoo.exceptions import NodeExistsError, NoNodeError, NotEmptyError
from kazoo.protocol.states import EventType

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.paths import decode_name, encode_name
from gateway.metadata.values import MetadataUnavailable

log = logging.getLogger("gateway.connections")

__all__ = [
    "ConnectionDirectory",
    "ConsumerGroup",
    "RemoteConnection",
    "RemoteConsumers",
    "ReplicaEntry",
]

DEFAULT_PREFIX = "/starlight-rabbitmq"
#: Record writes per ZooKeeper transaction (a record is ~1 KB: far below the 1 MB limit).
BATCH = 100
#: The JSON of a connection's consumers per record (a consumer is ~200 bytes: ~300 a page).
PAGE_BYTES = 64 * 1024
#: A transaction also ends once its records hold this much (ZooKeeper refuses a request
#: over 1 MB, and BATCH pages of consumers could be).
BATCH_BYTES = 512 * 1024
#: How long an asker waits for the owning replica to act on a close request.
CLOSE_TIMEOUT = 10.0

#: What a replica does with a close request: close the connection (False: it had none).
Closer = Callable[[str, str], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class RemoteConnection:
    replica: str
    connection: str
    info: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RemoteConsumers:
    """Consumers of one connection (one page of them), as a replica's record says."""

    replica: str
    connection: str
    about: Mapping[str, Any]  # the connection, as its consumers' channel_details need it
    consumers: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ConsumerGroup:
    """What a replica publishes of one connection's consumers (both parts opaque here)."""

    about: Mapping[str, Any]
    consumers: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    replica: str
    info: Mapping[str, Any]


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def consumer_pages(connection: str, group: ConsumerGroup) -> dict[str, bytes]:
    """The records of ``connection``'s consumers: record key -> data, each holding at most
    ``PAGE_BYTES`` of consumers' JSON (at least one consumer); none without consumers."""
    about = _json(dict(group.about))
    pages: list[list[bytes]] = []
    size = 0
    for consumer in group.consumers:
        encoded = _json(dict(consumer))
        if not pages or (pages[-1] and size + len(encoded) > PAGE_BYTES):
            pages.append([])
            size = 0
        pages[-1].append(encoded)
        size += len(encoded) + 1
    return {
        f"{connection}#{index}": b'{"connection":%s,"consumers":[%s],"v":1}'
        % (about, b",".join(page))
        for index, page in enumerate(pages)
    }


def _page_connection(key: str) -> str:
    connection, _, _ = key.rpartition("#")
    return connection


class ConnectionDirectory:
    def __init__(
        self,
        hosts: str,
        replica: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        session_timeout: float = 30.0,
        connect_timeout: float = 15.0,
        request_timeout: float = 10.0,
    ) -> None:
        self.replica = replica
        self._replicas = f"{prefix}/replicas"
        self._connections = f"{prefix}/connections"
        self._consumers = f"{prefix}/connection-consumers"
        self._closes = f"{prefix}/connection-closes"
        self._session = KazooSession(
            hosts,
            owner="connection directory",
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            on_reconnected=self._on_reconnected,
        )
        # What this replica's records hold in ZooKeeper now (connection id -> data; consumers
        # record key, "<connection id>#<page>", -> data).
        self._written: dict[str, bytes] = {}
        self._written_consumers: dict[str, bytes] = {}
        self._replica_data = b""
        self._replica_written = False
        self._wakeup = trio.Event()

    @property
    def _client(self) -> Any:
        return self._session.client

    async def connect(self) -> None:
        await self._session.connect()

    async def aclose(self) -> None:
        await self._session.aclose()

    async def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        await self._session.connect()
        return await self._session.call_in_thread(fn, what, *args)

    # ------------------------------------------------------------------ this replica

    async def run(
        self,
        local: Callable[[], Mapping[str, Mapping[str, Any]]],
        closer: Closer,
        replica_info: Mapping[str, Any],
        *,
        consumers: Callable[[], Mapping[str, ConsumerGroup]] | None = None,
        interval: float = 1.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Keep this replica's records equal to ``local()`` (connection id -> info) and
        ``consumers()`` (connection id -> its consumers; connections without any left out),
        and act on close requests with ``closer(connection id, reason)``, until cancelled."""
        self._replica_data = _json({"v": 1, "info": dict(replica_info)})
        await self._call("create the connection folders", self._prepare)
        task_status.started()
        try:
            while True:
                with trio.move_on_after(interval):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                if not self._session.connected:
                    continue
                try:
                    await self._round(local, consumers, closer)
                except MetadataUnavailable as error:
                    log.warning("connection directory: %s; trying again", error)
        finally:
            # A stopping replica takes its records away at once rather than when its
            # session times out (its connections are closing anyway).
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(5),
                contextlib.suppress(MetadataUnavailable),
            ):
                await self._call("remove this replica's records", self._leave)

    def _prepare(self) -> None:  # a worker thread
        # The replica's node first: a lister removes a folder whose replica has no node.
        self._client.ensure_path(self._replicas)
        self._write_replica()
        for path in self._folders():
            self._client.ensure_path(path)

    def _folders(self) -> tuple[str, ...]:
        return tuple(self._mine(f) for f in (self._connections, self._consumers, self._closes))

    def _write_replica(self) -> None:  # a worker thread
        path = f"{self._replicas}/{encode_name(self.replica)}"
        try:
            self._client.create(path, self._replica_data, ephemeral=True)
        except NodeExistsError:
            self._client.set(path, self._replica_data)
        self._replica_written = True

    def _mine(self, folder: str) -> str:
        return f"{folder}/{encode_name(self.replica)}"

    async def _round(
        self,
        local: Callable[[], Mapping[str, Mapping[str, Any]]],
        consumers: Callable[[], Mapping[str, ConsumerGroup]] | None,
        closer: Closer,
    ) -> None:
        wanted = {
            connection: _json({"v": 1, "info": dict(info)}) for connection, info in local().items()
        }
        pages: dict[str, bytes] = {}
        if consumers is not None:
            for connection, group in consumers().items():
                pages.update(consumer_pages(connection, group))
        await self._call("write this replica's connections", self._sync, wanted, pages)
        for connection, reason in await self._call("read close requests", self._requests):
            closed = False
            try:
                closed = await closer(connection, reason)
            finally:
                await self._call("remove a close request", self._done, connection)
            log.info(
                "connection %s: close requested through the management API: %s",
                connection,
                "closed" if closed else "already gone",
            )

    def _sync(self, wanted: dict[str, bytes], pages: dict[str, bytes]) -> None:  # a worker thread
        client = self._client
        if not self._replica_written:
            # A new session: the old one's records and replica node are gone, and so may be
            # its folders (removed as stale meanwhile).
            self._write_replica()
            for path in self._folders():
                client.ensure_path(path)
        ops = _changes(self._mine(self._connections), self._written, wanted)
        ops.extend(_changes(self._mine(self._consumers), self._written_consumers, pages))
        for batch in _batches(ops):
            transaction = client.transaction()
            for op in batch:
                if op.kind == "create":
                    transaction.create(op.path, op.data, ephemeral=True)
                elif op.kind == "set":
                    transaction.set_data(op.path, op.data)
                else:
                    transaction.delete(op.path)
            if any(isinstance(result, Exception) for result in transaction.commit()):
                for folder in {op.path.rpartition("/")[0] for op in batch}:
                    client.ensure_path(folder)
                for op in batch:  # one at a time, whatever is there
                    self._write_one(op.path, op.kind, op.data)
            for op in batch:
                if op.kind == "delete":
                    op.written.pop(op.key, None)
                else:
                    op.written[op.key] = op.data

    def _write_one(self, path: str, kind: str, data: bytes) -> None:
        client = self._client
        try:
            if kind == "delete":
                client.delete(path)
            else:
                try:
                    client.create(path, data, ephemeral=True)
                except NodeExistsError:
                    client.set(path, data)
        except NoNodeError:
            if kind != "delete":
                raise  # the folder is gone again: the next round writes everything anew

    def _requests(self) -> list[tuple[str, str]]:  # a worker thread
        folder = self._mine(self._closes)
        found: list[tuple[str, str]] = []
        try:
            children = self._client.get_children(folder, watch=self._on_request)
        except NoNodeError:
            self._client.ensure_path(folder)
            return found
        for child in children:
            try:
                data, _ = self._client.get(f"{folder}/{child}")
                connection = decode_name(child)
                reason = str(json.loads(data).get("reason", ""))
            except NoNodeError:
                continue  # its asker gave up meanwhile
            except ValueError:
                log.warning("connection directory: ignoring %s/%s: not a request", folder, child)
                continue
            found.append((connection, reason))
        return found

    def _done(self, connection: str) -> None:  # a worker thread
        with contextlib.suppress(NoNodeError):
            self._client.delete(f"{self._mine(self._closes)}/{encode_name(connection)}")

    def _leave(self) -> None:  # a worker thread
        for folder, written in (
            (self._mine(self._connections), self._written),
            (self._mine(self._consumers), self._written_consumers),
        ):
            for key in list(written):
                self._write_one(f"{folder}/{encode_name(key)}", "delete", b"")
            written.clear()
        for path in (f"{self._replicas}/{encode_name(self.replica)}", *self._folders()):
            with contextlib.suppress(NoNodeError, NotEmptyError):
                self._client.delete(path)

    def _on_request(self, event: Any) -> None:  # kazoo's watch thread
        if event.type != EventType.NONE:
            self._session.notify(self._wake)

    def _wake(self) -> None:
        self._wakeup.set()

    def _on_reconnected(self, new_session: bool) -> None:
        if new_session:
            # The ephemeral records went with the old session: write them all again.
            self._written.clear()
            self._written_consumers.clear()
            self._replica_written = False
        self._wake()  # and the close-request watch is set again by the next listing

    # ------------------------------------------------------------------ the fleet

    async def replicas(self) -> list[ReplicaEntry]:
        """Every live replica that runs a directory (this one included)."""
        return [
            ReplicaEntry(replica, info)
            for replica, info in await self._call("list the replicas", self._read_replicas)
        ]

    def _read_replicas(self) -> list[tuple[str, Mapping[str, Any]]]:
        found = []
        for child in _children(self._client, self._replicas):
            path = f"{self._replicas}/{child}"
            data = _data(path, partial(self._client.get, path))
            if data is not None:
                found.append((decode_name(child), data.get("info", {})))
        return found

    async def connections(self) -> list[RemoteConnection]:
        """Every replica's connections as their records say (this one's included, as last
        written)."""
        return [
            RemoteConnection(replica, connection, info)
            for replica, connection, info in await self._call(
                "list the connections", self._read_connections
            )
        ]

    def _read_connections(self) -> list[tuple[str, str, Mapping[str, Any]]]:
        found = []
        for folder, child, data in self._read_records(self._connections):
            found.append((decode_name(folder), decode_name(child), data.get("info", {})))
        return found

    def _read_records(self, top: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(replica folder, child, data) of every record under ``top``; the empty folders
        of replicas that have no node (stopped or dead ones) are removed on the way. The
        records are asked for all at once (pipelined on the session) rather than one round
        trip each: 2,000 records in 0.54 s instead of 1.44 s on the shared stack's ZooKeeper
        (while a test suite ran on it); /api/queues reads the consumers' records too."""
        client = self._client
        live = set(_children(client, self._replicas))
        asked = []
        for folder in _children(client, top):
            children = _children(client, f"{top}/{folder}")
            if folder not in live and not children:
                for stale in (self._connections, self._consumers, self._closes):
                    _remove_stale(client, f"{stale}/{folder}")
                continue
            for child in children:
                path = f"{top}/{folder}/{child}"
                asked.append((folder, child, path, client.get_async(path)))
        found = []
        for folder, child, path, answer in asked:
            data = _data(path, answer.get)
            if data is not None:
                found.append((folder, child, data))
        return found

    async def consumers(self) -> list[RemoteConsumers]:
        """Every replica's consumers as their records say (this one's included, as last
        written), a connection's in one or more entries (pages)."""
        return list(await self._call("list the consumers", self._read_consumers))

    def _read_consumers(self) -> list[RemoteConsumers]:
        found = []
        for folder, child, data in self._read_records(self._consumers):
            consumers = data.get("consumers")
            about = data.get("connection")
            if not isinstance(consumers, list) or not isinstance(about, dict):
                log.warning("connection directory: ignoring %s/%s: not consumers", folder, child)
                continue
            found.append(
                RemoteConsumers(
                    decode_name(folder),
                    _page_connection(decode_name(child)),
                    about,
                    tuple(c for c in consumers if isinstance(c, dict)),
                )
            )
        return found

    async def request_close(self, replica: str, connection: str, reason: str, user: str) -> bool:
        """Ask ``replica`` to close ``connection``; True once it acted on the request, False
        when the replica is gone or did not act within ``CLOSE_TIMEOUT`` (the request is
        withdrawn then)."""
        path = f"{self._closes}/{encode_name(replica)}/{encode_name(connection)}"
        data = _json({"v": 1, "reason": reason, "user": user})

        def ask() -> bool:  # a worker thread
            try:
                self._client.create(path, data, ephemeral=True)
            except NoNodeError:
                return False  # the replica's folder is gone: so is the replica
            except NodeExistsError:
                pass  # asked already (by someone else): the same answer will do
            return True

        if not await self._call("ask for a connection close", ask):
            return False
        with trio.move_on_after(CLOSE_TIMEOUT):
            while True:
                fired = trio.Event()

                def watch(event: Any, fired: trio.Event = fired) -> None:  # watch thread
                    self._session.notify(fired.set)

                pending = await self._call(
                    "wait for a close request",
                    lambda watch=watch: self._client.exists(path, watch=watch),
                )
                if pending is None:
                    return True  # the owner deleted it: done
                await fired.wait()
        await self._call("withdraw a close request", _remove_stale, self._client, path)
        return False


@dataclass(frozen=True, slots=True)
class _Op:
    kind: str  # "create", "set" or "delete"
    path: str
    data: bytes
    written: dict[str, bytes]  # what the directory wrote in this folder: updated once done
    key: str


def _changes(folder: str, written: dict[str, bytes], wanted: dict[str, bytes]) -> list[_Op]:
    """The writes that make ``folder``'s records, ``written`` now, ``wanted``."""
    ops = []
    for key, data in wanted.items():
        before = written.get(key)
        if before != data:
            kind = "create" if before is None else "set"
            ops.append(_Op(kind, f"{folder}/{encode_name(key)}", data, written, key))
    ops.extend(
        _Op("delete", f"{folder}/{encode_name(key)}", b"", written, key)
        for key in written.keys() - wanted.keys()
    )
    return ops


def _batches(ops: list[_Op]) -> list[list[_Op]]:
    """``ops`` in transactions of at most BATCH writes and about BATCH_BYTES of data."""
    batches: list[list[_Op]] = []
    size = 0
    for op in ops:
        if not batches or len(batches[-1]) >= BATCH or size + len(op.data) > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(op)
        size += len(op.data)
    return batches


def _children(client: Any, path: str) -> list[str]:
    try:
        return list(client.get_children(path))
    except NoNodeError:
        return []


def _data(path: str, read: Callable[[], tuple[bytes, Any]]) -> dict[str, Any] | None:
    try:
        raw, _ = read()
        data = json.loads(raw)
    except NoNodeError:
        return None
    except ValueError:
        log.warning("connection directory: ignoring %s: not JSON", path)
        return None
    return data if isinstance(data, dict) else None


def _exists(client: Any, path: str) -> bool:
    return client.exists(path) is not None


def _remove_stale(client: Any, path: str) -> None:
    with contextlib.suppress(NoNodeError, NotEmptyError):
        client.delete(path)
