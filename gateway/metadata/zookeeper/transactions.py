"""Entity writes as ZooKeeper transactions: create exchanges and queues, bind, register topic
keys and consumers, write drain records. (Deleting a queue or an exchange, with its bindings
and records, is deletes.py.)

Every write is one ``multi``, so it happens whole or not at all, and is compare-and-set by
construction: a path can be created only once. docs/metadata.md ("Writes") has the table of
each operation's transaction and its answer to a lost race; here each write is one
``attempt`` that ``retry_races`` repeats while it answers AGAIN (a race it can explain: a
missing bucket, a record that came or went), up to ``ATTEMPTS`` times. Each successful write
is applied to the namespace's view in the answer callback (calls.py), so it is in the view
when the write returns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from gateway.metadata.codec import (
    DrainKey,
    OwnerKey,
    TopicKey,
    binding_id,
    consumer_child,
    consumer_from_child,
    decode_drain,
    decode_exchange,
    decode_queue,
    drain_child,
    encode_binding,
    encode_drain,
    encode_exchange,
    encode_owner,
    encode_queue,
    mark_consumed,
    owner_child,
    queue_of_child,
    topic_key_child,
)
from gateway.metadata.errors import ConsumerConflict, MissingEntity
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.paths import (
    SEPARATOR,
    Folder,
    Layout,
    bucket_for,
    decode_binding_id,
    decode_exchange_binding_id,
    encode_name,
    is_exchange_binding_id,
)
from gateway.metadata.values import DrainRecord, by_queue
from gateway.metadata.zookeeper.calls import (
    AGAIN,
    Again,
    KazooCalls,
    absent,
    retry_races,
    unexpected,
    value,
)
from gateway.metadata.zookeeper.ops import Create, Delete, Op, SetData
from gateway.metadata.zookeeper.reclaim import EphemeralRecord, EphemeralRecords
from gateway.metadata.zookeeper.watcher import NamespaceWatcher
from gateway.model.entities import Binding, Exchange, ExchangeBinding, Queue

log = logging.getLogger(__name__)


def sentinel(layout: Layout, namespace: str, queue_child: str) -> list[Op]:
    """Create and delete a child of the queue's drains bucket: nothing is left, but every
    replica's children watch on the bucket fires (a data change alone would fire none), and the
    bucket's cversion grows by two with no name changed, which makes their mirrors read the
    bucket's records again (mirror.py, "replaced entities")."""
    # "<queue>," is no name encode_name produces, so it never clashes with a record.
    path = layout.node(namespace, Folder.DRAINS, queue_child + SEPARATOR)
    return [Create(path), Delete(path)]


def binding_ref(layout: Layout, namespace: str, folder: Folder, name: str, binding: str) -> str:
    """A binding's ref under its queue or exchange node (``binding``: the binding id)."""
    return f"{layout.node(namespace, folder, encode_name(name))}/{binding}"


def exchange_binding_refs(layout: Layout, namespace: str, binding: str) -> list[str]:
    """An exchange binding's refs (``binding``: its id): under its source and its
    destination, one ref when they are the same exchange."""
    parsed = decode_exchange_binding_id(binding)
    ends = dict.fromkeys((parsed.source, parsed.destination))
    return [binding_ref(layout, namespace, Folder.EXCHANGES, end, binding) for end in ends]


def queue_binding_refs(
    layout: Layout, namespace: str, binding: str, queue: str, exchange: str
) -> list[str]:
    """A queue binding's two refs (``binding``: its id): under its queue, then its exchange."""
    return [
        binding_ref(layout, namespace, Folder.QUEUES, queue, binding),
        binding_ref(layout, namespace, Folder.EXCHANGES, exchange, binding),
    ]


def node_and_refs(node: str, refs: list[str], data: bytes | None) -> list[Op]:
    """Create a binding's ``node`` with ``data``, then its refs; with None, delete them (the
    node first, in the same order)."""
    if data is None:
        return [Delete(node), *(Delete(ref) for ref in refs)]
    return [Create(node, data), *(Create(ref) for ref in refs)]


def queue_binding_ops(
    layout: Layout, namespace: str, binding: Binding, *, create: bool
) -> list[Op]:
    """Create (with its data) or delete the queue binding's node and its two refs."""
    child = binding_id(binding)
    refs = queue_binding_refs(layout, namespace, child, binding.queue, binding.exchange)
    data = encode_binding(binding) if create else None
    return node_and_refs(layout.node(namespace, Folder.BINDINGS, child), refs, data)


def unbind_ops(layout: Layout, namespace: str, binding: str) -> list[Op]:
    """Delete a binding (by id: a queue's or an exchange's) with its refs."""
    if is_exchange_binding_id(binding):
        folder = Folder.EXCHANGE_BINDINGS
        refs = exchange_binding_refs(layout, namespace, binding)
    else:
        parsed = decode_binding_id(binding)
        folder = Folder.BINDINGS
        refs = queue_binding_refs(layout, namespace, binding, parsed.queue, parsed.exchange)
    return node_and_refs(layout.node(namespace, folder, binding), refs, None)


def create_ops(layout: Layout, namespace: str, entity: Exchange | Queue | Binding) -> list[Op]:
    """Create an exchange, a queue, or a binding with its two refs (no checks)."""
    if isinstance(entity, Exchange):
        path = layout.node(namespace, Folder.EXCHANGES, encode_name(entity.name))
        return [Create(path, encode_exchange(entity))]
    if isinstance(entity, Queue):
        path = layout.node(namespace, Folder.QUEUES, encode_name(entity.name))
        return [Create(path, encode_queue(entity))]
    return queue_binding_ops(layout, namespace, entity, create=True)


@dataclass
class QueueRecords:
    """A queue's records in the owners, consumers and drains folders, as listed."""

    owner: bool = False
    consumers: list[str] = field(default_factory=list)
    drains: list[str] = field(default_factory=list)


def submit_queue_records(
    calls: KazooCalls, namespace: str, name: str, what: str
) -> Callable[[], Awaitable[QueueRecords]]:
    """Submit the listings of the queue's buckets in the owners, consumers and drains folders
    (with the other reads of this turn: one multiRead); the function returned awaits them."""
    child = encode_name(name)
    replies = {
        folder: calls.submit_children(
            calls.layout.bucket(namespace, folder, bucket_for(folder, child)), what
        )
        for folder in (Folder.OWNERS, Folder.CONSUMERS, Folder.DRAINS)
    }

    async def records() -> QueueRecords:
        listed = {folder: await calls.wait(reply, what) for folder, reply in replies.items()}
        return QueueRecords(
            owner=child in listed[Folder.OWNERS],
            consumers=[c for c in listed[Folder.CONSUMERS] if queue_of_child(c) == child],
            drains=[
                d
                for d in listed[Folder.DRAINS]
                if queue_of_child(d) == child and d != child + SEPARATOR
            ],
        )

    return records


async def list_queue_records(
    calls: KazooCalls, namespace: str, name: str, what: str
) -> QueueRecords:
    """List the queue's buckets in the owners, consumers and drains folders (one request)."""
    return await submit_queue_records(calls, namespace, name, what)()


async def read_queue_for_consumer(
    calls: KazooCalls, queue_path: str, queue: str, what: str
) -> tuple[bytes, int]:
    """The queue's document as a new consumer writes it back (marked consumed when the queue
    is auto-delete: codec.py's ``mark_consumed`` says why) and the version it was read at;
    ``MissingEntity`` if the queue is not there."""
    document = await calls.read_data(queue_path, what)
    if document is None:
        raise MissingEntity("queue", queue)
    data, version = document
    queue_entity = decode_queue(encode_name(queue), data)
    return (mark_consumed(data) if queue_entity.auto_delete else data), version


class DrainWrites:
    """Drain records written in another write's transaction: created where there is none,
    replaced (set_data, plus a sentinel in the queue's bucket so that every replica looks
    again) where there is one. Whether one exists is the mirror's guess; a wrong guess fails
    the transaction, is corrected here, and the caller tries again."""

    def __init__(
        self,
        calls: KazooCalls,
        watcher: NamespaceWatcher,
        namespace: str,
        records: Mapping[tuple[str, str], DrainRecord],
    ) -> None:
        self._calls = calls
        self._layout = calls.layout
        self._namespace = namespace
        self._records = dict(records)
        self._children = {key: drain_child(*key) for key in records}
        mirror = watcher.mirror(namespace)
        self._exists = {
            key: mirror is not None and mirror.get(Folder.DRAINS, child) is not None
            for key, child in self._children.items()
        }
        self.paths = {
            self._layout.node(namespace, Folder.DRAINS, child): key
            for key, child in self._children.items()
        }

    def _replaced_queues(self) -> list[str]:
        return sorted({queue for (queue, _), exists in self._exists.items() if exists})

    def ops(self) -> list[Op]:
        ops: list[Op] = []
        for key, record in self._records.items():
            path = self._layout.node(self._namespace, Folder.DRAINS, self._children[key])
            if self._exists[key]:
                ops.append(SetData(path, encode_drain(record)))
            else:
                ops.append(Create(path, encode_drain(record)))
        for queue in self._replaced_queues():
            ops += sentinel(self._layout, self._namespace, encode_name(queue))
        return ops

    def applied(self, mirror: NamespaceMirror) -> None:
        for key, record in self._records.items():
            child = self._children[key]
            entity = DrainKey(key[0], key[1], record)
            if self._exists[key]:
                mirror.learned(Folder.DRAINS, child, entity)
            else:
                mirror.own_created(Folder.DRAINS, child, entity)
        for queue in self._replaced_queues():
            mirror.own_touched(Folder.DRAINS, encode_name(queue), 2)

    async def failed(self, op: Op, error: Exception, what: str) -> None:
        """Correct the guess that made ``op`` fail (or create its bucket)."""
        key = self.paths.get(op.path)
        if key is not None and isinstance(op, Create) and isinstance(error, NodeExistsError):
            self._exists[key] = True
        elif key is not None and isinstance(op, SetData) and isinstance(error, NoNodeError):
            self._exists[key] = False
        elif isinstance(op, Create) and isinstance(error, NoNodeError):
            await self._calls.ensure_parents(self._namespace, op.path, what)
        else:
            raise unexpected(error, what)


class EntityTransactions:
    """The store's writes of entities and records (all but deletes of queues and exchanges)."""

    def __init__(
        self,
        calls: KazooCalls,
        watcher: NamespaceWatcher,
        ephemerals: EphemeralRecords,
        replica_id: str,
    ) -> None:
        self._calls = calls
        self._layout = calls.layout
        self._watcher = watcher
        self._ephemerals = ephemerals
        self._replica_id = replica_id
        # Numbers this replica's consumer records (unique with the replica id).
        self._serials = 0

    def next_serial(self) -> int:
        """A number for a new consumer record of this replica."""
        self._serials += 1
        return self._serials

    def drain_writes(
        self, namespace: str, records: Mapping[tuple[str, str], DrainRecord]
    ) -> DrainWrites:
        return DrainWrites(self._calls, self._watcher, namespace, records)

    # ------------------------------------------------------------------ exchanges, queues

    async def create_exchange(self, namespace: str, exchange: Exchange) -> Exchange:
        winner = await self._create_entity(
            namespace,
            Folder.EXCHANGES,
            encode_name(exchange.name),
            exchange,
            encode_exchange(exchange),
            f"declare exchange {exchange.name!r}",
        )
        assert isinstance(winner, Exchange)
        return winner

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        if queue.owner is not None:
            return await self._create_exclusive_queue(namespace, queue)
        winner = await self._create_entity(
            namespace,
            Folder.QUEUES,
            encode_name(queue.name),
            queue,
            encode_queue(queue),
            f"declare queue {queue.name!r}",
        )
        assert isinstance(winner, Queue)
        return winner

    async def _create_entity(
        self,
        namespace: str,
        folder: Folder,
        child: str,
        entity: Exchange | Queue,
        data: bytes,
        what: str,
    ) -> Exchange | Queue:
        """Create unless it exists; the winner otherwise. The create is the compare-and-set:
        exactly one of any number of concurrent creates of a path succeeds, and the others
        read what it wrote."""
        await self._calls.prepare(what)
        path = self._layout.node(namespace, folder, child)
        ops: list[Op] = [Create(path, data)]

        def created() -> None:
            self._watcher.own(namespace, lambda m: m.own_created(folder, child, entity))

        async def attempt() -> Exchange | Queue | Again:
            failure = await self._calls.transact(what, ops, created)
            if failure is None:
                return entity
            _, error = failure
            if isinstance(error, NodeExistsError):
                winner = await self.read_entity(namespace, folder, child, what)
                if winner is not None:
                    return winner
                return AGAIN  # deleted again before we could read it: try to create it
            if isinstance(error, NoNodeError):
                await self._calls.ensure_parents(namespace, path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def _create_exclusive_queue(self, namespace: str, queue: Queue) -> Queue:
        """The queue and its owner record in one transaction: an exclusive queue exists only
        with a live owner, until the owner's session ends (then the leader deletes it)."""
        what = f"declare exclusive queue {queue.name!r}"
        await self._calls.prepare(what)
        child = encode_name(queue.name)
        path = self._layout.node(namespace, Folder.QUEUES, child)
        owner = owner_child(queue.name)
        owner_path = self._layout.node(namespace, Folder.OWNERS, owner)
        owner_data = encode_owner(self._replica_id, queue.owner or "")
        ops: list[Op] = [
            Create(path, encode_queue(queue)),
            Create(owner_path, owner_data, ephemeral=True),
        ]

        def created() -> None:
            record = EphemeralRecord(namespace, queue.name, Folder.OWNERS, owner, owner_data)
            self._ephemerals.track(owner_path, record)

            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_created(Folder.QUEUES, child, queue)
                mirror.own_created(Folder.OWNERS, owner, OwnerKey(queue.name))

            self._watcher.own(namespace, apply)

        async def attempt() -> Queue | Again:
            failure = await self._calls.transact(what, ops, created)
            if failure is None:
                return queue
            index, error = failure
            if index == 0 and isinstance(error, NodeExistsError):
                winner = await self.read_entity(namespace, Folder.QUEUES, child, what)
                if winner is not None:
                    assert isinstance(winner, Queue)
                    return winner
                return AGAIN
            if isinstance(error, NoNodeError):
                await self._calls.ensure_parents(namespace, ops[index].path, what)
                return AGAIN
            if index == 1 and isinstance(error, NodeExistsError):
                # An owner record without its queue (they are created and deleted together;
                # only a hand edit or a bug leaves one): it owns nothing, remove it.
                log.error("metadata: removing the owner record %s of no queue", owner_path)
                await self._calls.delete_if_there(owner_path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def read_entity(
        self, namespace: str, folder: Folder, child: str, what: str
    ) -> Exchange | Queue | None:
        """Read an exchange or a queue node (None: there is none), and tell the view."""
        path = self._layout.node(namespace, folder, child)

        def apply(result: Any) -> Exchange | Queue | None:
            try:
                data, _stat = value(result, what)
            except NoNodeError:
                self._watcher.forget(namespace, folder, child)
                return None
            entity = (decode_exchange if folder is Folder.EXCHANGES else decode_queue)(child, data)
            self._watcher.own(namespace, lambda m: m.learned(folder, child, entity))
            return entity

        client = self._calls.client
        return await self._calls.ask(lambda: client.get_async(path), apply, what)

    # ------------------------------------------------------------------ bindings, topic keys

    async def add_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        what = f"bind queue {binding.queue!r} to exchange {binding.exchange!r}"

        def missing(index: int) -> MissingEntity:
            if index == 1:
                return MissingEntity("queue", binding.queue)
            return MissingEntity("exchange", binding.exchange)

        return await self.create_binding(
            namespace,
            Folder.BINDINGS,
            binding_id(binding),
            binding,
            queue_binding_ops(self._layout, namespace, binding, create=True),
            by_queue(binding.queue, drains),
            what,
            missing,
        )

    async def remove_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        what = f"unbind queue {binding.queue!r} from exchange {binding.exchange!r}"
        return await self.delete_binding(
            namespace,
            Folder.BINDINGS,
            binding_id(binding),
            queue_binding_ops(self._layout, namespace, binding, create=False),
            by_queue(binding.queue, drains),
            what,
        )

    async def create_binding(
        self,
        namespace: str,
        folder: Folder,
        child: str,
        binding: Binding | ExchangeBinding,
        base: list[Op],
        drains: Mapping[tuple[str, str], DrainRecord],
        what: str,
        missing: Callable[[int], MissingEntity],
    ) -> bool:
        """Create a binding (a queue's or an exchange's): ``base`` creates its node (first)
        and its refs, ``drains`` are written with them. False if it was there already;
        ``missing(index)`` names the entity whose node the ref at ``base[index]`` lacked."""
        await self._calls.prepare(what)
        writes = self.drain_writes(namespace, drains)

        def created() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_created(folder, child, binding)
                writes.applied(mirror)

            self._watcher.own(namespace, apply)

        def exists(index: int, error: Exception) -> None:
            if index == 0 and isinstance(error, NodeExistsError):
                self._watcher.own(namespace, lambda m: m.learned(folder, child, binding))

        async def attempt() -> bool | Again:
            ops = base + writes.ops()
            failure = await self._calls.transact(what, ops, created, exists)
            if failure is None:
                return True
            index, error = failure
            if index >= len(base):
                await writes.failed(ops[index], error, what)
                return AGAIN
            if index == 0 and isinstance(error, NodeExistsError):
                return False
            if index == 0 and isinstance(error, NoNodeError):
                await self._calls.ensure_parents(namespace, ops[0].path, what)
                return AGAIN
            if isinstance(error, NoNodeError):
                raise missing(index)
            if isinstance(error, NodeExistsError):
                # A ref without its binding (only a hand edit makes one): remove it, retry.
                log.error("metadata: removing dangling binding ref %s", ops[index].path)
                await self._calls.delete_if_there(ops[index].path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def delete_binding(
        self,
        namespace: str,
        folder: Folder,
        child: str,
        base: list[Op],
        drains: Mapping[tuple[str, str], DrainRecord],
        what: str,
    ) -> bool:
        """Delete a binding: ``base`` deletes its node (first) and its refs, ``drains`` are
        written with them. False if it was not there (then nothing is written)."""
        await self._calls.prepare(what)
        writes = self.drain_writes(namespace, drains)

        def deleted() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_deleted(folder, child)
                writes.applied(mirror)

            self._watcher.own(namespace, apply)

        def gone(index: int, error: Exception) -> None:
            if index == 0 and isinstance(error, NoNodeError):
                self._watcher.forget(namespace, folder, child)

        repaired = False

        async def attempt() -> bool | Again:
            nonlocal base, repaired
            ops = base + writes.ops()
            failure = await self._calls.transact(what, ops, deleted, gone)
            if failure is None:
                return True
            index, error = failure
            if index >= len(base):
                await writes.failed(ops[index], error, what)
                return AGAIN
            if index == 0 and isinstance(error, NoNodeError):
                return False
            if isinstance(error, NoNodeError) and not repaired:
                # A binding without one of its refs: only a bug or a hand edit makes one.
                # Remove what is there rather than leave a binding nobody can delete.
                log.error("metadata: binding %r in %s had no ref %s", child, namespace, ops[index])
                for op in base[1:]:
                    await self._calls.delete_if_there(op.path, what)
                base = base[:1]
                repaired = True
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        what = f"register routing key {routing_key!r} of exchange {exchange!r}"
        await self._calls.prepare(what)
        child = topic_key_child(exchange, routing_key)
        key = TopicKey(exchange, routing_key)
        ops: list[Op] = [Create(self._layout.node(namespace, Folder.TOPIC_KEYS, child))]

        def created() -> None:
            self._watcher.own(namespace, lambda m: m.own_created(Folder.TOPIC_KEYS, child, key))

        def exists(index: int, error: Exception) -> None:
            if isinstance(error, NodeExistsError):
                self._watcher.own(namespace, lambda m: m.learned(Folder.TOPIC_KEYS, child, key))

        async def attempt() -> bool | Again:
            failure = await self._calls.transact(what, ops, created, exists)
            if failure is None:
                return True
            _, error = failure
            if isinstance(error, NodeExistsError):
                return False
            if isinstance(error, NoNodeError):
                await self._calls.ensure_parents(namespace, ops[0].path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def sync_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        what = f"look up routing key {routing_key!r} of exchange {exchange!r}"
        await self._calls.prepare(what)
        path = self._layout.node(
            namespace, Folder.TOPIC_KEYS, topic_key_child(exchange, routing_key)
        )
        # No sync: callers read right after a write of their own (the binder's half of the
        # handshake), and ZooKeeper serves a session's read after its earlier writes, on a
        # server that has applied everything ordered before them: all a sync would give.
        return await self._calls.exists(path, what)

    async def unregister_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        what = f"unregister routing key {routing_key!r} of exchange {exchange!r}"
        await self._calls.prepare(what)
        child = topic_key_child(exchange, routing_key)

        def deleted() -> None:
            self._watcher.own(namespace, lambda m: m.own_deleted(Folder.TOPIC_KEYS, child))

        ops: list[Op] = [Delete(self._layout.node(namespace, Folder.TOPIC_KEYS, child))]
        failure = await self._calls.transact(what, ops, deleted)
        if failure is None:
            return True
        if isinstance(failure[1], NoNodeError):
            self._watcher.forget(namespace, Folder.TOPIC_KEYS, child)
            return False
        raise unexpected(failure[1], what)

    # ------------------------------------------------------------------ consumers

    async def add_consumer(self, namespace: str, queue: str, *, exclusive: bool) -> str:
        """Register a consumer (an ephemeral record of this session).

        Every registration raises the queue node's version (it writes the node's data back,
        marking an auto-delete queue as consumed): a conditional delete or an exclusive
        registration that listed the consumers before it then fails its compare-and-set and
        lists again. An ordinary consumer checks in its transaction that no exclusive one
        exists; an exclusive one lists the consumers after reading the version, and writes
        at that version."""
        what = f"register a consumer of queue {queue!r}"
        await self._calls.prepare(what)
        queue_path = self._layout.node(namespace, Folder.QUEUES, encode_name(queue))
        marker = consumer_child(queue, None, None)
        marker_path = self._layout.node(namespace, Folder.CONSUMERS, marker)
        serial = None if exclusive else self.next_serial()
        child = marker if serial is None else consumer_child(queue, self._replica_id, serial)
        path = self._layout.node(namespace, Folder.CONSUMERS, child)
        entity = consumer_from_child(child)

        def created() -> None:
            record = EphemeralRecord(namespace, queue, Folder.CONSUMERS, child, b"")
            self._ephemerals.track(path, record)
            self._watcher.own(namespace, lambda m: m.own_created(Folder.CONSUMERS, child, entity))

        async def attempt() -> str | Again:
            written, version = await read_queue_for_consumer(self._calls, queue_path, queue, what)
            if exclusive:
                records = await list_queue_records(self._calls, namespace, queue, what)
                if records.consumers:
                    raise ConsumerConflict(queue)
                ops: list[Op] = [
                    SetData(queue_path, written, version),
                    Create(path, b"", ephemeral=True),
                ]
            else:
                ops = [
                    *absent(marker_path),
                    SetData(queue_path, written),
                    Create(path, b"", ephemeral=True),
                ]
            failure = await self._calls.transact(what, ops, created)
            if failure is None:
                return child
            index, error = failure
            op = ops[index]
            if op.path == queue_path:
                if isinstance(error, NoNodeError):
                    raise MissingEntity("queue", queue)
                return AGAIN  # BadVersion: a consumer came or went since we read; again
            if op.path == marker_path and isinstance(error, NodeExistsError):
                raise ConsumerConflict(queue)
            if isinstance(error, NoNodeError):
                await self._calls.ensure_parents(namespace, op.path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def remove_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        what = f"unregister a consumer of queue {queue!r}"
        await self._calls.prepare(what)
        path = self._layout.node(namespace, Folder.CONSUMERS, consumer)
        self._ephemerals.untrack(path)

        def deleted() -> None:
            self._watcher.own(namespace, lambda m: m.own_deleted(Folder.CONSUMERS, consumer))

        def gone(index: int, error: Exception) -> None:
            if isinstance(error, NoNodeError):
                self._watcher.forget(namespace, Folder.CONSUMERS, consumer)

        failure = await self._calls.transact(what, [Delete(path)], deleted, gone)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise unexpected(failure[1], what)

    # ------------------------------------------------------------------ drains

    async def read_drain(
        self, namespace: str, queue: str, topic: str
    ) -> tuple[DrainRecord, int] | None:
        what = f"read the drain of queue {queue!r} on {topic!r}"
        await self._calls.prepare(what)
        child = drain_child(queue, topic)
        path = self._layout.node(namespace, Folder.DRAINS, child)
        document = await self._calls.read_data(path, what)
        if document is None:
            self._watcher.forget(namespace, Folder.DRAINS, child)
            return None
        record = decode_drain(document[0])
        entity = DrainKey(queue, topic, record)
        self._watcher.own(namespace, lambda m: m.learned(Folder.DRAINS, child, entity))
        return record, document[1]

    async def update_drain(
        self, namespace: str, queue: str, topic: str, record: DrainRecord | None, *, version: int
    ) -> bool:
        what = f"update the drain of queue {queue!r} on {topic!r}"
        await self._calls.prepare(what)
        child = drain_child(queue, topic)
        path = self._layout.node(namespace, Folder.DRAINS, child)
        ops: list[Op]
        if record is None:
            ops = [Delete(path, version)]
        else:
            ops = [
                SetData(path, encode_drain(record), version),
                *sentinel(self._layout, namespace, encode_name(queue)),
            ]

        def done() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                if record is None:
                    mirror.own_deleted(Folder.DRAINS, child)
                else:
                    mirror.learned(Folder.DRAINS, child, DrainKey(queue, topic, record))
                    mirror.own_touched(Folder.DRAINS, encode_name(queue), 2)

            self._watcher.own(namespace, apply)

        failure = await self._calls.transact(what, ops, done)
        if failure is None:
            return True
        if isinstance(failure[1], NoNodeError | BadVersionError):
            return False
        raise unexpected(failure[1], what)


class TransactionsUser:
    """A part of the store that works through the entity transactions (admin.py's bulk
    import and delete, synced_reads.py's reads): the calls, their layout, the namespace
    watcher and the transactions, as the store hands them over."""

    def __init__(
        self, calls: KazooCalls, watcher: NamespaceWatcher, transactions: EntityTransactions
    ) -> None:
        self._calls = calls
        self._layout = calls.layout
        self._watcher = watcher
        self._transactions = transactions
