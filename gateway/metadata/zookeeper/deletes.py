"""Deleting a queue or an exchange with its bindings (and a queue's records), atomically.

The node's children are refs to its bindings (an exchange's: to queues, and to and from
exchanges), so listing them gives every binding, and
deleting the node fails (NotEmpty) if a binding was added after the listing: then we list
again. A cascade too big for one transaction deletes bindings in atomic batches first (each
binding with its two refs) and the node last.

A queue's records (owner, consumers, drains) go in the node's transaction; so do the
``REMOVE`` records of ``subscriptions``. The node is deleted at the version read before
anything was listed, and every consumer registration raises that version: a consumer
registered after our listing fails the delete (BadVersion), and we list again. That makes a
``QueueCondition`` exact: it is checked on listings no registration has overtaken.

Each attempt is the same named steps (``_attempt``): read the node's document and version, list
the refs and the records (one multiRead, served in that order, so the version is read before
anything is listed), check the condition, commit one batch, and explain a failure
(``_after_failure``) as "list again", "gone already", or a real error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from gateway.metadata.codec import (
    DrainKey,
    decode_queue,
    drain_child,
    encode_drain,
    is_consumed,
    owner_child,
    topic_key_from_child,
)
from gateway.metadata.errors import ConditionNotMet
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.mixed_read import MISSING, Read
from gateway.metadata.paths import (
    Folder,
    decode_exchange_binding_id,
    encode_name,
    is_exchange_binding_id,
)
from gateway.metadata.values import REMOVE, DrainRecord, QueueCondition
from gateway.metadata.zookeeper.calls import (
    AGAIN,
    ATTEMPTS,
    Again,
    KazooCalls,
    Reply,
    absent,
    retry_races,
    unexpected,
)
from gateway.metadata.zookeeper.ops import TXN_BYTES, TXN_OPS, Create, Delete, Op, op_size
from gateway.metadata.zookeeper.reclaim import EphemeralRecords
from gateway.metadata.zookeeper.transactions import (
    DrainWrites,
    QueueRecords,
    submit_queue_records,
    unbind_ops,
)
from gateway.metadata.zookeeper.watcher import NamespaceWatcher

log = logging.getLogger(__name__)


class EntityDeletes:
    """The store's deletes of queues and exchanges."""

    def __init__(
        self, calls: KazooCalls, watcher: NamespaceWatcher, ephemerals: EphemeralRecords
    ) -> None:
        self._calls = calls
        self._watcher = watcher
        self._ephemerals = ephemerals

    async def delete_queue(
        self,
        namespace: str,
        name: str,
        *,
        condition: QueueCondition | None = None,
        subscriptions: Collection[str] = (),
    ) -> bool:
        delete = _CascadingDelete(
            self._calls,
            self._watcher,
            namespace,
            Folder.QUEUES,
            name,
            condition=condition,
            subscriptions=tuple(subscriptions),
            ephemerals=self._ephemerals,
        )
        return await delete.run()

    async def delete_exchange(
        self,
        namespace: str,
        name: str,
        *,
        if_unused: bool = False,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        writes = DrainWrites(self._calls, self._watcher, namespace, drains or {})
        delete = _CascadingDelete(
            self._calls,
            self._watcher,
            namespace,
            Folder.EXCHANGES,
            name,
            refuse_bindings=if_unused,
            writes=writes,
        )
        deleted = await delete.run()
        if deleted:
            await self._delete_topic_keys(namespace, name, delete.what)
        return deleted

    async def _delete_topic_keys(self, namespace: str, exchange: str, what: str) -> None:
        """Best effort, after the exchange is gone: the keys this replica knows of. Topic keys
        do not depend on the exchange existing, so one registered concurrently may stay (as it
        would if registered just after the delete)."""
        mirror = self._watcher.mirror(namespace)
        if mirror is None:
            return
        children = [
            child
            for child in mirror.children(Folder.TOPIC_KEYS)
            if topic_key_from_child(child).exchange == exchange
        ]
        for start in range(0, len(children), TXN_OPS):
            await self._delete_topic_key_batch(namespace, children[start : start + TXN_OPS], what)

    async def _delete_topic_key_batch(self, namespace: str, pending: list[str], what: str) -> None:
        layout = self._calls.layout
        for _ in range(ATTEMPTS):
            if not pending:
                return
            ops: list[Op] = [Delete(layout.node(namespace, Folder.TOPIC_KEYS, c)) for c in pending]

            def deleted(batch: list[str] = pending) -> None:
                def apply(mirror: NamespaceMirror) -> None:
                    for child in batch:
                        mirror.own_deleted(Folder.TOPIC_KEYS, child)

                self._watcher.own(namespace, apply)

            def gone(index: int, error: Exception, batch: list[str] = pending) -> None:
                if isinstance(error, NoNodeError):
                    self._watcher.forget(namespace, Folder.TOPIC_KEYS, batch[index])

            failure = await self._calls.transact(what, ops, deleted, gone)
            if failure is None:
                return
            index, error = failure
            if not isinstance(error, NoNodeError):
                raise unexpected(error, what)
            # Someone else deleted that one: the rest, without it.
            pending = pending[:index] + pending[index + 1 :]


@dataclass(frozen=True)
class _Batch:
    """One transaction of a delete: whole bindings (each with its two refs), and — when every
    binding fits — the tail after them: the queue's records, drain writes, the node itself."""

    ops: list[Op]
    unbound: list[str]
    whole: bool
    tail_start: int
    records: QueueRecords | None

    def deletes_node(self, index: int) -> bool:
        """Whether ``ops[index]`` is the delete of the entity's own node (always the last)."""
        return self.whole and index == len(self.ops) - 1


class _CascadingDelete:
    """One delete of a queue or an exchange (see the module docstring)."""

    def __init__(
        self,
        calls: KazooCalls,
        watcher: NamespaceWatcher,
        namespace: str,
        folder: Folder,
        name: str,
        *,
        refuse_bindings: bool = False,
        condition: QueueCondition | None = None,
        subscriptions: tuple[str, ...] = (),
        writes: DrainWrites | None = None,
        ephemerals: EphemeralRecords | None = None,
    ) -> None:
        self._calls = calls
        self._layout = calls.layout
        self._watcher = watcher
        self._namespace = namespace
        self._folder = folder
        self._name = name
        self._refuse_bindings = refuse_bindings
        self._condition = condition
        self._subscriptions = subscriptions
        self._writes = writes
        self._ephemerals = ephemerals
        kind = "queue" if folder is Folder.QUEUES else "exchange"
        self.what = f"delete {kind} {name!r}"
        self._child = encode_name(name)
        self._path = self._layout.node(namespace, folder, self._child)
        self._owner_path = self._layout.node(namespace, Folder.OWNERS, owner_child(name))
        # Paths that made a transaction fail twice with NoNode and were checked absent: the
        # other half of a dangling ref (only a hand edit makes one). Left out from then on.
        self._suspects: set[str] = set()
        self._missing: set[str] = set()

    async def run(self) -> bool:
        """True when this call deleted it; False when it was not there."""
        await self._calls.prepare(self.what)
        return await retry_races(self.what, self._attempt)

    async def _attempt(self) -> bool | Again:
        """Read the node (its document and version), list its refs and the queue's records
        (all in one multiRead: group_commit.py, served in this order), check the condition,
        and commit the next batch at the version read first; a failure is explained by
        ``_after_failure``."""
        node = self._submit_node()
        refs_reply = self._calls.submit_children(self._path, self.what)
        records_of = None
        if self._folder is Folder.QUEUES:
            records_of = submit_queue_records(self._calls, self._namespace, self._name, self.what)
        document = await self._calls.wait(node, self.what)
        refs = await self._calls.wait(refs_reply, self.what)
        records = None if records_of is None else await records_of()
        if document is None:
            return False
        data, version = document
        if self._condition is not None and self._condition is not QueueCondition.UNUSED:
            _check_document(self._name, self._condition, data)
        if self._refuse_bindings and any(map(self._as_source, refs)):
            raise ConditionNotMet("exchange", self._name, "it has bindings")
        if records is not None:
            _check_records(self._name, self._condition, records)
        batch = self._next_batch(refs, version, records)
        failure = await self._calls.transact(
            self.what, batch.ops, lambda: self._applied(batch), self._failed_callback(batch)
        )
        if failure is None:
            return True if batch.whole else AGAIN  # AGAIN: list what bindings are left
        return await self._after_failure(batch, *failure)

    def _as_source(self, ref: str) -> bool:
        """Whether ``ref`` is a binding this exchange is the source of: RabbitMQ's if-unused
        and auto-delete count only those (``has_for_source``); an exchange binding it is the
        destination of goes with it."""
        if not is_exchange_binding_id(ref):
            return True
        try:
            return decode_exchange_binding_id(ref).source == self._name
        except ValueError:
            return True

    def _submit_node(self) -> Reply[tuple[bytes, int] | None]:
        """Read the node's document and version (None: no node, forgotten by the view in
        answer order)."""

        def apply(answer: Any) -> tuple[bytes, int] | None:
            if answer is MISSING:
                self._watcher.forget(self._namespace, self._folder, self._child)
                return None
            return bytes(answer[0]), int(answer[1])

        return self._calls.submit_read(Read.DATA, self._path, self.what, apply)

    # ------------------------------------------------------------------ planning

    def _next_batch(self, refs: list[str], version: int, records: QueueRecords | None) -> _Batch:
        """As many bindings as fit in one transaction beside the tail; the tail too if all
        of them fit."""
        tail = self._tail_ops(version, records)
        ops: list[Op] = []
        unbound: list[str] = []
        size = sum(op_size(op) for op in tail)
        for ref in refs:
            ref_ops = [
                op
                for op in unbind_ops(self._layout, self._namespace, ref)
                if op.path not in self._missing
            ]
            if len(ops) + len(ref_ops) + len(tail) > TXN_OPS or size >= TXN_BYTES:
                break
            ops += ref_ops
            unbound.append(ref)
            size += sum(op_size(op) for op in ref_ops)
        whole = len(unbound) == len(refs)
        tail_start = len(ops)
        if whole:
            ops += tail
        return _Batch(ops, unbound, whole, tail_start, records)

    def _tail_ops(self, version: int, records: QueueRecords | None) -> list[Op]:
        """The last transaction's own part: the queue's records, the REMOVE records of its
        subscriptions, the drain writes, and the node itself at the version listed."""
        namespace, name, node = self._namespace, self._name, self._layout.node
        tail: list[Op] = []
        if records is not None:
            if records.owner:
                tail.append(Delete(self._owner_path))
            tail += [Delete(node(namespace, Folder.CONSUMERS, c)) for c in records.consumers]
            tail += [Delete(node(namespace, Folder.DRAINS, d)) for d in records.drains]
            removal = encode_drain(REMOVE)
            tail += [
                Create(node(namespace, Folder.DRAINS, drain_child(name, topic)), removal)
                for topic in self._subscriptions
            ]
        if self._condition is QueueCondition.ORPHANED:
            # "No owner" inside the transaction: an owner that came back after our listing
            # fails it (NodeExists), so a live queue is never reaped.
            tail += absent(self._owner_path)
        if self._writes is not None:
            tail += self._writes.ops()
        tail.append(Delete(self._path, version))
        return tail

    # ------------------------------------------------------------------ answers

    def _applied(self, batch: _Batch) -> None:
        """The batch committed: out of the view (in answer order, see calls.py)."""

        def apply(mirror: NamespaceMirror) -> None:
            for ref in batch.unbound:
                kind = Folder.EXCHANGE_BINDINGS if is_exchange_binding_id(ref) else Folder.BINDINGS
                mirror.own_deleted(kind, ref)
            if not batch.whole:
                return
            if batch.records is not None:
                self._records_deleted(mirror, batch.records)
            if self._writes is not None:
                self._writes.applied(mirror)
            mirror.own_deleted(self._folder, self._child)

        if batch.whole and self._ephemerals is not None:
            # The queue's records went with it: a new session has none of them to claim.
            self._ephemerals.untrack_queue(self._namespace, self._name)
        self._watcher.own(self._namespace, apply)

    def _records_deleted(self, mirror: NamespaceMirror, records: QueueRecords) -> None:
        if records.owner:
            mirror.own_deleted(Folder.OWNERS, owner_child(self._name))
        for consumer in records.consumers:
            mirror.own_deleted(Folder.CONSUMERS, consumer)
        for drain in records.drains:
            mirror.own_deleted(Folder.DRAINS, drain)
        for topic in self._subscriptions:
            removal = DrainKey(self._name, topic, REMOVE)
            mirror.own_created(Folder.DRAINS, drain_child(self._name, topic), removal)

    def _failed_callback(self, batch: _Batch) -> Callable[[int, Exception], None]:
        """What to apply to the view when ``batch`` fails (in answer order)."""

        def failed(index: int, error: Exception) -> None:
            if batch.deletes_node(index) and isinstance(error, NoNodeError):
                self._watcher.forget(self._namespace, self._folder, self._child)

        return failed

    async def _after_failure(self, batch: _Batch, index: int, error: Exception) -> bool | Again:
        op = batch.ops[index]
        if batch.deletes_node(index) and isinstance(error, NoNodeError):
            return False  # deleted by someone else meanwhile
        if batch.whole and index >= batch.tail_start:
            return await self._tail_failed(op, error)
        return await self._binding_failed(op, error)

    async def _tail_failed(self, op: Op, error: Exception) -> Again:
        if self._writes is not None and op.path in self._writes.paths:
            await self._writes.failed(op, error, self.what)
            return AGAIN
        owner_came_back = op.path == self._owner_path and isinstance(op, Create)
        if owner_came_back and isinstance(error, NodeExistsError):
            raise ConditionNotMet("queue", self._name, "its owner is alive")
        if isinstance(op, Create) and isinstance(error, NoNodeError):
            await self._calls.ensure_parents(self._namespace, op.path, self.what)
            return AGAIN
        if isinstance(error, NoNodeError | NodeExistsError | BadVersionError):
            return AGAIN  # a record came or went meanwhile: list again
        if isinstance(error, NotEmptyError):
            return AGAIN  # a binding came meanwhile: list again
        raise unexpected(error, self.what)

    async def _binding_failed(self, op: Op, error: Exception) -> Again:
        if isinstance(error, NoNodeError):
            await self._suspect_missing(op.path)
            return AGAIN  # a binding went meanwhile: list again
        if isinstance(error, NotEmptyError | BadVersionError):
            return AGAIN  # a binding came meanwhile: list again
        raise unexpected(error, self.what)

    async def _suspect_missing(self, path: str) -> None:
        """A binding's node or ref was not there. Usually the binding was removed meanwhile,
        and listing again shows it gone; a path that fails twice and is checked absent is the
        missing half of a dangling binding: left out, so that the rest can be deleted."""
        if path in self._suspects and not await self._calls.exists(path, self.what):
            log.error("metadata: %s is missing; deleting the rest of it", path)
            self._missing.add(path)
        self._suspects.add(path)


def _check_document(name: str, condition: QueueCondition, data: bytes) -> None:
    """The parts of ``condition`` the queue's own document decides."""
    queue = decode_queue(encode_name(name), data)
    if condition is QueueCondition.ABANDONED:
        if not queue.auto_delete:
            raise ConditionNotMet("queue", name, "it is not auto-delete")
        if not is_consumed(data):
            raise ConditionNotMet("queue", name, "it never had a consumer")
    elif condition is QueueCondition.ORPHANED and queue.owner is None:
        raise ConditionNotMet("queue", name, "it is not exclusive")


def _check_records(name: str, condition: QueueCondition | None, records: QueueRecords) -> None:
    """The parts of ``condition`` the queue's records decide."""
    if condition in (QueueCondition.UNUSED, QueueCondition.ABANDONED) and records.consumers:
        raise ConditionNotMet("queue", name, "it has consumers")
    if condition is QueueCondition.ORPHANED and records.owner:
        raise ConditionNotMet("queue", name, "its owner is alive")
