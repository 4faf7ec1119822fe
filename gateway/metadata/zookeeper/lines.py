"""The lines of single-active-consumer queues: joining one, becoming its active consumer,
stepping down, leaving (model/consumers.py has RabbitMQ's rules, docs/metadata.md the layout).

A consumer of such a queue is an ephemeral record in the queue's consumers bucket whose name
says everything the other replicas need: ``<queue>,<replica>,<serial>,<sequence>,<priority>,
<credit>,<w|a>`` (waiting or active). The first three parts are the consumer's id, what the
backend holds; the record is replaced when it becomes active or steps down: the new one
created, then the old one deleted, in one transaction, so that another replica's view never
shows the consumer missing between the two events (nor twice: its mirror keeps one record per
consumer).

Two compare-and-sets on the queue node's version (which every consumer registration raises,
docs/metadata.md "Writes") make the line exact across replicas:

* joining writes the queue node at the version it read and takes that version + 1 as its
  sequence, so sequences are unique and follow registration order fleet-wide; a consumer
  joining an empty line is active at once (RabbitMQ's first consumer), decided on the line
  read after that version;
* activating reads the version, then the line, and writes at that version: a consumer
  registered after the read makes it read again, so the choice is made on the line as it is.
  Two replicas activating at once cannot both succeed.

Leaving is a plain delete; so is a replica's death (the session's records go), after which the
others see no active record and the next one is activated by its own replica.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kazoo.exceptions import NoNodeError

from gateway.metadata.codec import (
    consumer_child,
    consumer_from_child,
    line_child,
    queue_of_child,
)
from gateway.metadata.errors import MissingEntity
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.paths import Folder, bucket_for, encode_name
from gateway.metadata.values import PickActive
from gateway.metadata.zookeeper.calls import AGAIN, Again, KazooCalls, retry_races, unexpected
from gateway.metadata.zookeeper.ops import Create, Delete, Op, SetData
from gateway.metadata.zookeeper.transactions import read_queue_for_consumer
from gateway.metadata.zookeeper.watcher import NamespaceWatcher
from gateway.model.consumers import LinePlace, Standing

__all__ = ["ConsumerLines"]


class ConsumerLines:
    """This replica's places in the lines of single-active-consumer queues."""

    def __init__(
        self,
        calls: KazooCalls,
        watcher: NamespaceWatcher,
        replica_id: str,
        next_serial: Callable[[], int],
    ) -> None:
        self._calls = calls
        self._layout = calls.layout
        self._watcher = watcher
        self._replica_id = replica_id
        self._next_serial = next_serial
        # (namespace, consumer id) -> the record's current name (it changes with its state).
        self._records: dict[tuple[str, str], str] = {}

    def holds(self, namespace: str, consumer: str) -> bool:
        return (namespace, consumer) in self._records

    def _path(self, namespace: str, child: str) -> str:
        return self._layout.node(namespace, Folder.CONSUMERS, child)

    def _queue_path(self, namespace: str, queue: str) -> str:
        return self._layout.node(namespace, Folder.QUEUES, encode_name(queue))

    async def join(self, namespace: str, queue: str, standing: Standing) -> str:
        """Register a consumer at the back of ``queue``'s line, waiting (active if the line
        is empty); returns its id."""
        what = f"register a consumer of queue {queue!r}"
        await self._calls.prepare(what)
        queue_path = self._queue_path(namespace, queue)
        serial = self._next_serial()
        consumer = consumer_child(queue, self._replica_id, serial)

        async def attempt() -> str | Again:
            written, version = await read_queue_for_consumer(self._calls, queue_path, queue, what)
            # Into an empty line, active at once (RabbitMQ makes the first consumer active
            # when it registers): the line is read after the version, so a consumer that
            # joined meanwhile fails the compare-and-set below.
            alone = not await self._line(namespace, queue, what)
            place = LinePlace(
                consumer,
                self._replica_id,
                version + 1,
                standing.priority,
                standing.credit,
                active=alone,
            )
            child = line_child(queue, self._replica_id, serial, place)
            ops: list[Op] = [
                SetData(queue_path, written, version),
                Create(self._path(namespace, child), b"", ephemeral=True),
            ]

            def joined() -> None:
                self._records[(namespace, consumer)] = child
                entity = consumer_from_child(child)
                self._watcher.own(
                    namespace, lambda m: m.own_created(Folder.CONSUMERS, child, entity)
                )

            failure = await self._calls.transact(what, ops, joined)
            if failure is None:
                return consumer
            index, error = failure
            if index == 0:
                if isinstance(error, NoNodeError):
                    raise MissingEntity("queue", queue)
                return AGAIN  # BadVersion: the queue's consumers changed since we read
            if isinstance(error, NoNodeError):
                await self._calls.ensure_parents(namespace, ops[index].path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def _line(self, namespace: str, queue: str, what: str) -> dict[str, LinePlace]:
        """The queue's line as ZooKeeper has it now: record name -> place."""
        child = encode_name(queue)
        bucket = bucket_for(Folder.CONSUMERS, child)
        line = {}
        for name in await self._calls.children(
            self._layout.bucket(namespace, Folder.CONSUMERS, bucket), what
        ):
            if queue_of_child(name) != child:
                continue
            try:
                key = consumer_from_child(name)
            except ValueError:
                continue
            if key.queue == queue and key.place is not None:
                line[name] = key.place
        return line

    async def activate(self, namespace: str, queue: str, pick: PickActive) -> bool:
        what = f"activate a consumer of queue {queue!r}"
        await self._calls.prepare(what)
        queue_path = self._queue_path(namespace, queue)

        async def attempt() -> bool | Again:
            document = await self._calls.read_data(queue_path, what)
            if document is None:
                return False
            data, version = document
            line = await self._line(namespace, queue, what)
            places = sorted(line.values(), key=lambda place: place.sequence)
            if any(place.active for place in places):
                return False
            chosen = pick(places)
            if chosen is None or chosen.replica != self._replica_id:
                return False
            old = next(name for name, place in line.items() if place == chosen)
            if self._records.get((namespace, chosen.consumer)) != old:
                return False  # not ours any more (it left meanwhile)
            guard = SetData(queue_path, data, version)
            failure = await self._replace(
                namespace, queue, old, replace(chosen, active=True), what, guard
            )
            if failure is None:
                return True
            return AGAIN if failure == 0 else False

        return await retry_races(what, attempt)

    async def deactivate(self, namespace: str, queue: str, consumer: str) -> None:
        what = f"deactivate a consumer of queue {queue!r}"
        await self._calls.prepare(what)
        old = self._records.get((namespace, consumer))
        if old is None:
            return
        place = consumer_from_child(old).place
        if place is None or not place.active:
            return
        await self._replace(namespace, queue, old, replace(place, active=False), what)

    async def _replace(
        self,
        namespace: str,
        queue: str,
        old: str,
        place: LinePlace,
        what: str,
        guard: SetData | None = None,
    ) -> int | None:
        """Replace this replica's record ``old`` by one of ``place`` (after ``guard``, the
        compare-and-set of the queue node, if given). None on success, else the index of the
        operation that failed."""
        serial = consumer_from_child(old).serial
        assert serial is not None
        new = line_child(queue, self._replica_id, serial, place)
        ops: list[Op] = [
            *([guard] if guard is not None else []),
            # Created before the old one is deleted: the events reach other replicas in this
            # order, and their views go from one record to the other (mirror.py ``_place``).
            Create(self._path(namespace, new), b"", ephemeral=True),
            Delete(self._path(namespace, old)),
        ]
        entity = consumer_from_child(new)

        def replaced() -> None:
            self._records[(namespace, place.consumer)] = new

            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_deleted(Folder.CONSUMERS, old)
                mirror.own_created(Folder.CONSUMERS, new, entity)

            self._watcher.own(namespace, apply)

        def gone(index: int, error: Exception) -> None:
            if isinstance(error, NoNodeError) and ops[index].path == self._path(namespace, old):
                self._watcher.forget(namespace, Folder.CONSUMERS, old)

        failure = await self._calls.transact(what, ops, replaced, gone)
        if failure is None:
            return None
        index, error = failure
        if isinstance(error, NoNodeError) or (guard is not None and index == 0):
            return index
        raise unexpected(error, what)

    async def leave(self, namespace: str, queue: str, consumer: str) -> None:
        what = f"unregister a consumer of queue {queue!r}"
        await self._calls.prepare(what)
        child = self._records.pop((namespace, consumer), None)
        if child is None:
            return

        def deleted() -> None:
            self._watcher.own(namespace, lambda m: m.own_deleted(Folder.CONSUMERS, child))

        def gone(index: int, error: Exception) -> None:
            if isinstance(error, NoNodeError):
                self._watcher.forget(namespace, Folder.CONSUMERS, child)

        path = self._path(namespace, child)
        failure = await self._calls.transact(what, [Delete(path)], deleted, gone)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise unexpected(failure[1], what)

    def forget_session(self) -> None:
        """The session expired: its records are gone; their consumers join again if they
        still run (backend/pulsar/consumers/single_active.py)."""
        self._records.clear()
