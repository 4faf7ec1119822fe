"""Exchange-to-exchange bindings as ZooKeeper transactions (Exchange.Bind, Exchange.Unbind).

An exchange binding is a node in ``exchange-bindings`` plus a ref under each of its two
exchange nodes (one when it binds an exchange to itself), created and deleted in one
transaction with any drain records the caller asks for; as with queue bindings
(transactions.py), the refs make it exist only while both exchanges do, and make deleting an
exchange remove it (deletes.py lists the refs). docs/metadata.md has the layout.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kazoo.exceptions import NodeExistsError, NoNodeError

from gateway.metadata.codec import encode_exchange_binding, exchange_binding_id
from gateway.metadata.errors import MissingEntity
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.paths import Folder, decode_exchange_binding_id
from gateway.metadata.store import DrainRecord
from gateway.metadata.zookeeper.calls import (
    AGAIN,
    Again,
    Create,
    Delete,
    KazooCalls,
    Op,
    retry_races,
    unexpected,
)
from gateway.metadata.zookeeper.transactions import EntityTransactions, exchange_binding_refs
from gateway.metadata.zookeeper.watcher import NamespaceWatcher
from gateway.model.entities import ExchangeBinding

log = logging.getLogger(__name__)


class ExchangeBindingWrites:
    """The store's writes of exchange bindings."""

    def __init__(
        self, calls: KazooCalls, watcher: NamespaceWatcher, transactions: EntityTransactions
    ) -> None:
        self._calls = calls
        self._layout = calls.layout
        self._watcher = watcher
        self._transactions = transactions

    def _ops(self, namespace: str, child: str, binding: ExchangeBinding | None) -> list[Op]:
        """Create (with ``binding``'s data) or delete (None) the node and its refs."""
        node = self._layout.node(namespace, Folder.EXCHANGE_BINDINGS, child)
        refs = exchange_binding_refs(self._layout, namespace, child)
        if binding is not None:
            return [Create(node, encode_exchange_binding(binding)), *(Create(r) for r in refs)]
        return [Delete(node), *(Delete(ref) for ref in refs)]

    async def add(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        what = f"bind exchange {binding.destination!r} to exchange {binding.source!r}"
        await self._calls.prepare(what)
        child = exchange_binding_id(binding)
        writes = self._transactions.drain_writes(namespace, drains or {})
        base = self._ops(namespace, child, binding)

        def created() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_created(Folder.EXCHANGE_BINDINGS, child, binding)
                writes.applied(mirror)

            self._watcher.own(namespace, apply)

        def exists(index: int, error: Exception) -> None:
            if index == 0 and isinstance(error, NodeExistsError):
                self._watcher.own(
                    namespace, lambda m: m.learned(Folder.EXCHANGE_BINDINGS, child, binding)
                )

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
                # The refs go under the source first, then the destination: RabbitMQ reports
                # a missing source before a missing destination.
                parsed = decode_exchange_binding_id(child)
                raise MissingEntity("exchange", parsed.source if index == 1 else parsed.destination)
            if isinstance(error, NodeExistsError):
                log.error("metadata: removing dangling exchange binding ref %s", ops[index].path)
                await self._calls.delete_if_there(ops[index].path, what)
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)

    async def remove(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        what = f"unbind exchange {binding.destination!r} from exchange {binding.source!r}"
        await self._calls.prepare(what)
        child = exchange_binding_id(binding)
        writes = self._transactions.drain_writes(namespace, drains or {})
        base = self._ops(namespace, child, None)

        def deleted() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_deleted(Folder.EXCHANGE_BINDINGS, child)
                writes.applied(mirror)

            self._watcher.own(namespace, apply)

        def gone(index: int, error: Exception) -> None:
            if index == 0 and isinstance(error, NoNodeError):
                self._watcher.forget(namespace, Folder.EXCHANGE_BINDINGS, child)

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
                # A binding without one of its refs (only a bug or a hand edit makes one):
                # remove what is there rather than leave a binding nobody can delete.
                log.error("metadata: exchange binding %r had no ref %s", child, ops[index])
                for op in base[1:]:
                    await self._calls.delete_if_there(op.path, what)
                base = base[:1]
                repaired = True
                return AGAIN
            raise unexpected(error, what)

        return await retry_races(what, attempt)
