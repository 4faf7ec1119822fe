"""The replicas' delivery records: one persistent znode per replica per namespace.

``deliveries/<replica>`` holds what that replica delivered and has not seen settled (an
opaque record: backend/pulsar/delivery_records.py writes and reads it). It is persistent, not
ephemeral, because it is needed most when its replica is gone: Pulsar then gives the
replica's unacknowledged messages to consumers on other replicas, which must mark them
``redelivered``. The leader removes records of replicas gone for long
(backend/pulsar/leader/delivery_record_pruner.py).

Every replica follows the others' records with one-shot watches, re-armed only on the nodes
that fired (and the folder, for records that come and go). The watcher is one bound method
per follower, so re-arming it on a node twice registers it once (kazoo keeps a set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import trio
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import EventType

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.paths import decode_name, encode_name
from gateway.metadata.values import MetadataUnavailable
from gateway.metadata.zookeeper.calls import (
    AGAIN,
    Again,
    KazooCalls,
    nothing,
    retry_races,
    unexpected,
    value,
)
from gateway.metadata.zookeeper.ops import Create, SetData

log = logging.getLogger(__name__)

# After a failed read of the records, look again this much later (or when the connection
# changes).
RETRY_AFTER = 1.0


class DeliveryRecords:
    """Writes this replica's record and follows the others'."""

    def __init__(self, session: KazooSession, calls: KazooCalls, replica_id: str) -> None:
        self._session = session
        self._calls = calls
        self._own = encode_name(replica_id)

    def _folder(self, namespace: str) -> str:
        return self._calls.layout.deliveries(namespace)

    async def write(self, namespace: str, record: bytes | None) -> None:
        what = f"record this replica's deliveries in {namespace!r}"
        await self._calls.prepare(what)
        folder = self._folder(namespace)
        path = f"{folder}/{self._own}"
        if record is None:
            await self._calls.delete_if_there(path, what)
            return

        async def attempt() -> Again | None:
            failure = await self._calls.transact(what, [SetData(path, record)], nothing)
            if failure is None:
                return None
            if not isinstance(failure[1], NoNodeError):
                raise unexpected(failure[1], what)
            failure = await self._calls.transact(what, [Create(path, record)], nothing)
            if failure is None:
                return None
            if isinstance(failure[1], NoNodeError):
                # The folder is missing (a namespace written by an older version), or the
                # whole namespace was deleted: create the folder only under an existing node.
                failure = await self._calls.transact(what, [Create(folder)], nothing)
                if failure is not None and isinstance(failure[1], NoNodeError):
                    return None  # no namespace, nothing to record
            elif not isinstance(failure[1], NodeExistsError):
                raise unexpected(failure[1], what)
            return AGAIN

        await retry_races(what, attempt)

    async def recorders(self, namespace: str) -> set[str]:
        what = f"list the delivery records of {namespace!r}"
        await self._calls.prepare(what)
        return _decoded(await self._calls.children(self._folder(namespace), what))

    async def drop(self, namespace: str, replica: str) -> None:
        what = f"remove the delivery record of {replica} in {namespace!r}"
        await self._calls.prepare(what)
        await self._calls.delete_if_there(f"{self._folder(namespace)}/{encode_name(replica)}", what)

    async def follow(self, namespace: str, update: Callable[[Mapping[str, bytes]], None]) -> None:
        await self._session.connect()
        await _Follower(self._session, self._calls, self._folder(namespace), self._own).run(update)


def _decoded(children: list[str]) -> set[str]:
    names = set()
    for child in children:
        try:
            names.add(decode_name(child))
        except ValueError:
            log.warning("metadata: ignoring %r among the delivery records", child)
    return names


class _Follower:
    """Follows one namespace's records (but this replica's own) for one caller."""

    def __init__(self, session: KazooSession, calls: KazooCalls, folder: str, own: str) -> None:
        self._session = session
        self._calls = calls
        self._folder = folder
        self._own = own
        self._records: dict[str, bytes] = {}
        # What to read again: the folder's listing, and records whose watch fired.
        self._list = True
        self._stale: set[str] = set()
        self._woken = trio.Event()

    def _watch(self, event: Any) -> None:  # kazoo's watch thread
        self._session.notify(self._fired, event.type, event.path)

    def _fired(self, kind: str, path: str | None) -> None:
        if kind == EventType.CHILD or path is None or path == self._folder:
            self._list = True
        elif kind in (EventType.CHANGED, EventType.DELETED):
            self._stale.add(path.rsplit("/", 1)[-1])
        else:
            self._everything()
        self._woken.set()

    def _everything(self) -> None:
        self._list = True
        self._stale = set(self._records)

    async def run(self, update: Callable[[Mapping[str, bytes]], None]) -> None:
        session = self._session
        reported: dict[str, bytes] | None = None
        while not session.closed:
            changed = session.connection_changed
            if not session.connected:
                await changed.wait()
                # A new session has no watches: read everything again (a read that finds
                # a watch already there registers nothing new).
                self._everything()
                continue
            try:
                await self._read()
            except MetadataUnavailable as error:
                log.debug("metadata: following delivery records: %s", error)
                self._everything()
                with trio.move_on_after(RETRY_AFTER):
                    await changed.wait()
                continue
            if reported != self._records:
                reported = dict(self._records)
                update(
                    {
                        replica: data
                        for child, data in reported.items()
                        for replica in _decoded([child])
                    }
                )
            if not self._list and not self._stale:
                async with trio.open_nursery() as nursery:

                    async def wait(event: trio.Event) -> None:
                        await event.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(wait, self._woken)
                    nursery.start_soon(wait, changed)
            self._woken = trio.Event()

    async def _read(self) -> None:
        what = f"follow the delivery records in {self._folder}"
        client = self._calls.client
        if self._list:
            self._list = False

            def listed(result: Any) -> list[str] | None:
                try:
                    return list(value(result, what))
                except NoNodeError:
                    return None

            children = await self._calls.ask(
                lambda: client.get_children_async(self._folder, watch=self._watch), listed, what
            )
            if children is None:
                # No folder yet (a namespace written by an older version): watch for it.
                await self._calls.ask(
                    lambda: client.exists_async(self._folder, watch=self._watch),
                    lambda result: value(result, what),
                    what,
                )
                children = []
            others = {child for child in children if child != self._own}
            for gone in set(self._records) - others:
                del self._records[gone]
            self._stale |= others - set(self._records)
        stale, self._stale = self._stale, set()

        def read(result: Any) -> bytes | None:
            try:
                data, _stat = value(result, what)
            except NoNodeError:
                return None
            return bytes(data or b"")

        left = sorted(stale)

        def issue(path: str) -> Callable[[], Any]:
            return lambda: client.get_async(path, watch=self._watch)

        try:
            while left:
                data = await self._calls.ask(issue(f"{self._folder}/{left[0]}"), read, what)
                child = left.pop(0)
                if data is None:
                    self._records.pop(child, None)
                else:
                    self._records[child] = data
        finally:
            self._stale.update(left)
