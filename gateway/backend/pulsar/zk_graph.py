"""Exchange bindings as ZooKeeper has them now: the other half of every handshake through them.

A queue must have its subscription on a topic before any message it wants is written there
(docs/fleet.md, "Lazy subscriptions"). With exchange bindings, what a topic's messages are for
depends on bindings made on *several* exchanges, possibly by several replicas at once, and a
replica's view may lag each of them by milliseconds. So, as for one binding, whoever writes
reads the others' records from ZooKeeper (after a sync) right after its own write, and
subscribes what it finds:

* the binder of a queue binding on exchange E reads the exchange bindings that lead into E
  (and into those, ...), and the routing keys of every keyed exchange upstream;
* the binder of an exchange binding X -> D reads what leads into X (and the keys upstream)
  and what D leads to (exchange bindings and queue bindings, all the way down);
* the publisher of a new routing key of exchange S reads where S's bindings lead with it,
  all the way down.

Every path from an exchange's topic to a queue is completed by one last write; its writer's
reads come after every other write of the path, so it sees the whole path; and a publisher's
first message to a key comes after its key registration and its reads: whichever of a key's
registration and a path's last binding comes second in ZooKeeper's order finds the other
(activation.py has the two-party argument; here it is the same for each path). Fanout and
headers exchanges' topics have no key to register: their subscriptions are made by the
binders, before Bind-Ok.

``ZooKeeperGraph`` reads each exchange's node once (its refs name every binding it is an end
of: store.sync_edges_of) and builds a ``RoutingGraph`` of what it read; arguments are not read
(headers bindings count as matching: a subscription too many is harmless, its consumers filter).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gateway.backend.catalog import Catalog
from gateway.metadata.roles import Bindings, TopicKeys
from gateway.metadata.store import ExchangeEdges
from gateway.model.entities import Binding, Exchange, ExchangeBinding
from gateway.model.graph import RoutingGraph, binding_passes
from gateway.model.routing import Router

__all__ = ["ZooKeeperGraph"]


class SyncedRoutes(Bindings, TopicKeys, Protocol):
    """What the graph reads of the metadata store: exchanges' edges and topic exchanges'
    keys, as ZooKeeper has them now."""


class ZooKeeperGraph:
    """The bindings of the exchanges read so far, as ZooKeeper had them when read."""

    def __init__(self, catalog: Catalog, store: SyncedRoutes) -> None:
        self._catalog = catalog
        self._store = store
        self._edges: dict[str, ExchangeEdges] = {}
        self._exchanges: dict[str, Exchange | None] = {}

    async def exchange(self, name: str) -> Exchange | None:
        """The exchange (the view's, or ZooKeeper's if the view lacks it)."""
        if name not in self._exchanges:
            self._exchanges[name] = await self._catalog.find_exchange(name)
        return self._exchanges[name]

    async def edges(self, name: str) -> ExchangeEdges:
        found = self._edges.get(name)
        if found is None:
            found = self._edges[name] = await self._catalog.write(
                self._store.sync_edges_of(self._catalog.namespace, name)
            )
        return found

    async def upstream(self, name: str) -> set[str]:
        """``name`` and every exchange from which exchange bindings lead to it."""
        found = {name}
        pending = [name]
        while pending:
            for source, _key in (await self.edges(pending.pop())).incoming:
                if source not in found:
                    found.add(source)
                    pending.append(source)
        return found

    async def downstream(self, name: str, key: str | None = None) -> set[str]:
        """``name`` and every exchange that exchange bindings lead to from it, with routing
        key ``key`` (None: any key)."""
        found = {name}
        pending = [name]
        while pending:
            exchange = await self.exchange(pending.pop())
            if exchange is None:
                continue
            for destination, binding_key in (await self.edges(exchange.name)).outgoing:
                if destination not in found and binding_passes(exchange.type, binding_key, key):
                    found.add(destination)
                    pending.append(destination)
        return found

    async def keys(self, exchange: Exchange) -> frozenset[str]:
        """The routing keys registered for ``exchange`` (its per-key topics in use)."""
        return await self._catalog.write(
            self._store.sync_topic_keys(self._catalog.namespace, exchange.name)
        )

    async def graph(self, extra: Iterable[ExchangeBinding] = ()) -> RoutingGraph:
        """What was read, as a graph (``extra``: exchange bindings to add)."""
        edges: set[ExchangeBinding] = set(extra)
        bindings: dict[str, list[Binding]] = {}
        for name, found in self._edges.items():
            edges.update(ExchangeBinding(name, dest, key) for dest, key in found.outgoing)
            edges.update(ExchangeBinding(source, name, key) for source, key in found.incoming)
            bindings[name] = [Binding(queue, name, key) for queue, key in found.queues]
        for edge in edges:  # every end's type, from the view or ZooKeeper
            await self.exchange(edge.source)
            await self.exchange(edge.destination)

        def router(exchange: Exchange) -> Router:
            return Router(exchange.type, bindings.get(exchange.name, ()))

        return RoutingGraph(self._exchanges.get, router, edges)
