"""Whole-namespace administration: bulk import, and deleting every znode of a namespace.

Neither is part of ``MetadataStore``: imports from another store and benchmarks create many
entities at once, and vhost deletion (and tests) remove a namespace nobody uses any more. Both
work in batched transactions of up to ``TXN_OPS`` znodes, several in flight together.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio
from kazoo.exceptions import NoNodeError

from gateway.metadata.codec import binding_id
from gateway.metadata.paths import BUCKETS, Folder, encode_name
from gateway.metadata.zookeeper.calls import nothing, unexpected
from gateway.metadata.zookeeper.ops import TXN_BYTES, TXN_OPS, Delete, Op, op_size
from gateway.metadata.zookeeper.transactions import TransactionsUser, create_ops, unbind_ops
from gateway.model.entities import Binding, Exchange, Queue

Entity = Exchange | Queue | Binding


class NamespaceAdmin(TransactionsUser):
    async def bulk_create(
        self,
        namespace: str,
        *,
        exchanges: Iterable[Exchange] = (),
        queues: Iterable[Queue] = (),
        bindings: Iterable[Binding] = (),
        concurrency: int = 16,
    ) -> None:
        """Create many entities in batched transactions (~900 znodes each). Each batch is
        atomic; a batch that meets an existing entity is redone one entity at a time with the
        usual create-if-absent calls."""
        what = f"import metadata into {namespace!r}"
        await self._calls.prepare(what)
        folders = (Folder.EXCHANGES, Folder.QUEUES, Folder.BINDINGS)
        buckets = [
            self._layout.bucket(namespace, folder, f"{index:02x}")
            for folder in folders
            for index in range(BUCKETS)
        ]
        await self._calls.ensure_paths(
            namespace, [*self._layout.skeleton(namespace), *buckets], what
        )
        limiter = trio.CapacityLimiter(concurrency)

        async def batch(items: list[tuple[Entity, list[Op]]]) -> None:
            async with limiter:
                ops = [op for _, op_list in items for op in op_list]

                def created() -> None:
                    for entity, _ in items:
                        self._own_created(namespace, entity)

                failure = await self._calls.transact(what, ops, created)
            if failure is not None:
                for entity, _ in items:
                    await self._create_one(namespace, entity)

        async def run(entities: Iterable[Entity]) -> None:
            async with trio.open_nursery() as nursery:
                items: list[tuple[Entity, list[Op]]] = []
                count = size = 0
                for entity in entities:
                    ops = create_ops(self._layout, namespace, entity)
                    items.append((entity, ops))
                    count += len(ops)
                    size += sum(op_size(op) for op in ops)
                    if count >= TXN_OPS or size >= TXN_BYTES:
                        nursery.start_soon(batch, items)
                        items, count, size = [], 0, 0
                if items:
                    nursery.start_soon(batch, items)

        # Bindings need their queue and exchange: all of those first.
        await run([*exchanges, *queues])
        await run(bindings)

    def _own_created(self, namespace: str, entity: Entity) -> None:
        if isinstance(entity, Exchange):
            folder, child = Folder.EXCHANGES, encode_name(entity.name)
        elif isinstance(entity, Queue):
            folder, child = Folder.QUEUES, encode_name(entity.name)
        else:
            folder, child = Folder.BINDINGS, binding_id(entity)
        self._watcher.own(namespace, lambda m: m.own_created(folder, child, entity))

    async def _create_one(self, namespace: str, entity: Entity) -> None:
        if isinstance(entity, Exchange):
            await self._transactions.create_exchange(namespace, entity)
        elif isinstance(entity, Queue):
            await self._transactions.create_queue(namespace, entity)
        else:
            await self._transactions.add_binding(namespace, entity)

    async def delete_namespace(self, namespace: str, *, concurrency: int = 16) -> None:
        """Delete every znode of a namespace, in batched transactions. Not atomic. The
        namespace is closed on this replica first."""
        what = f"delete namespace {namespace!r}"
        await self._calls.prepare(what)
        self._watcher.close(namespace)
        listings = await self._list_buckets(namespace, what)
        # In three phases, so that each node is a leaf when its turn comes: bindings with
        # their refs, then entities and topic keys, then buckets.
        binding_folders = (Folder.BINDINGS, Folder.EXCHANGE_BINDINGS)
        bindings = [
            op.path
            for folder in binding_folders
            for _, children in listings[folder]
            for child in children
            for op in unbind_ops(self._layout, namespace, child)
        ]
        entities = [
            f"{self._layout.folder(namespace, folder)}/{bucket}/{child}"
            for folder in Folder
            if folder not in binding_folders
            for bucket, children in listings[folder]
            for child in children
        ]
        buckets = [
            f"{self._layout.folder(namespace, folder)}/{bucket}"
            for folder in Folder
            for bucket, _ in listings[folder]
        ]
        limiter = trio.CapacityLimiter(concurrency)

        async def delete(batch: list[str]) -> None:
            async with limiter:
                ops = [Delete(path) for path in batch]
                failure = await self._calls.transact(what, ops, nothing)
            if failure is not None:  # something changed meanwhile: one by one
                for path in batch:
                    await self._delete_tree(path, what)

        for phase in (bindings, entities, buckets):
            async with trio.open_nursery() as nursery:
                for start in range(0, len(phase), TXN_OPS):
                    nursery.start_soon(delete, phase[start : start + TXN_OPS])
        await self._delete_tree(self._layout.namespace(namespace), what)

    async def _list_buckets(
        self, namespace: str, what: str
    ) -> dict[Folder, list[tuple[str, list[str]]]]:
        """Every folder's buckets with their children (each folder's listings in flight
        together)."""
        listings: dict[Folder, list[tuple[str, list[str]]]] = {}
        for folder in Folder:
            folder_path = self._layout.folder(namespace, folder)
            buckets = await self._calls.children(folder_path, what)
            replies = [
                (bucket, self._calls.submit_children(f"{folder_path}/{bucket}", what))
                for bucket in buckets
            ]
            listings[folder] = [(b, await self._calls.wait(reply, what)) for b, reply in replies]
        return listings

    async def _delete_tree(self, path: str, what: str) -> None:
        """Delete ``path`` and whatever is below it, leaves first (for stragglers only)."""
        for child in await self._calls.children(path, what):
            await self._delete_tree(f"{path}/{child}", what)
        failure = await self._calls.transact(what, [Delete(path)], nothing)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise unexpected(failure[1], what)
