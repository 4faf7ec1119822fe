"""Exchange-to-exchange bindings as ZooKeeper transactions (Exchange.Bind, Exchange.Unbind).

An exchange binding is a node in ``exchange-bindings`` plus a ref under each of its two
exchange nodes (one when it binds an exchange to itself), created and deleted in one
transaction with any drain records the caller asks for; as with queue bindings
(transactions.py), the refs make it exist only while both exchanges do, and make deleting an
exchange remove it (deletes.py lists the refs). docs/metadata.md has the layout.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.metadata.codec import encode_exchange_binding, exchange_binding_id
from gateway.metadata.errors import MissingEntity
from gateway.metadata.paths import Folder
from gateway.metadata.values import DrainRecord
from gateway.metadata.zookeeper.calls import KazooCalls
from gateway.metadata.zookeeper.ops import Op
from gateway.metadata.zookeeper.transactions import (
    EntityTransactions,
    exchange_binding_refs,
    node_and_refs,
)
from gateway.model.entities import ExchangeBinding


class ExchangeBindingWrites:
    """The store's writes of exchange bindings."""

    def __init__(self, calls: KazooCalls, transactions: EntityTransactions) -> None:
        self._layout = calls.layout
        # The compare-and-set loops of a binding's create and delete are the queue
        # bindings' (transactions.py), with this binding's node and refs.
        self._transactions = transactions

    def _ops(self, namespace: str, child: str, binding: ExchangeBinding | None) -> list[Op]:
        """Create (with ``binding``'s data) or delete (None) the node and its refs."""
        node = self._layout.node(namespace, Folder.EXCHANGE_BINDINGS, child)
        refs = exchange_binding_refs(self._layout, namespace, child)
        data = None if binding is None else encode_exchange_binding(binding)
        return node_and_refs(node, refs, data)

    async def add(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        what = f"bind exchange {binding.destination!r} to exchange {binding.source!r}"
        child = exchange_binding_id(binding)

        def missing(index: int) -> MissingEntity:
            # The refs go under the source first, then the destination: RabbitMQ reports a
            # missing source before a missing destination.
            return MissingEntity("exchange", binding.source if index == 1 else binding.destination)

        return await self._transactions.create_binding(
            namespace,
            Folder.EXCHANGE_BINDINGS,
            child,
            binding,
            self._ops(namespace, child, binding),
            drains or {},
            what,
            missing,
        )

    async def remove(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        what = f"unbind exchange {binding.destination!r} from exchange {binding.source!r}"
        child = exchange_binding_id(binding)
        return await self._transactions.delete_binding(
            namespace,
            Folder.EXCHANGE_BINDINGS,
            child,
            self._ops(namespace, child, None),
            drains or {},
            what,
        )
