"""The synced reads: what the store has now, after a ``sync`` where another replica's write may
not have reached our server yet (docs/metadata.md, "Views"): an entity by name, a topic
exchange's routing keys, an exchange's edges, whether a namespace has exchange bindings, and
every namespace. An entity or a routing key found is put into this replica's view as well, so
that a caller that read it sees it there too.
"""

from __future__ import annotations

import contextlib
import logging

from gateway.metadata.codec import TopicKey
from gateway.metadata.paths import (
    SEPARATOR,
    Folder,
    bucket_for,
    decode_binding_id,
    decode_exchange_binding_id,
    decode_name,
    decode_topic_key,
    encode_name,
    is_exchange_binding_id,
)
from gateway.metadata.values import ExchangeEdges
from gateway.metadata.zookeeper.transactions import TransactionsUser
from gateway.model.entities import Exchange, Queue

__all__ = ["SyncedReads"]

log = logging.getLogger(__name__)


class SyncedReads(TransactionsUser):
    """The ``sync_*`` reads of the roles (Entities, Bindings, TopicKeys) and ``list_namespaces``
    (Views)."""

    async def sync_queue(self, namespace: str, name: str) -> Queue | None:
        found = await self._sync_entity(namespace, Folder.QUEUES, name, f"look up queue {name!r}")
        assert found is None or isinstance(found, Queue)
        return found

    async def sync_exchange(self, namespace: str, name: str) -> Exchange | None:
        what = f"look up exchange {name!r}"
        found = await self._sync_entity(namespace, Folder.EXCHANGES, name, what)
        assert found is None or isinstance(found, Exchange)
        return found

    async def _sync_entity(
        self, namespace: str, folder: Folder, name: str, what: str
    ) -> Exchange | Queue | None:
        """Read the node after a sync: the server we talk to may lag behind the one another
        replica wrote through, and sync makes it catch up first. The read is issued right
        after the sync on the same session, so it is answered after the sync completed (the
        sync's own answer is not awaited: kazoo reorders it)."""
        await self._calls.prepare(what)
        child = encode_name(name)
        self._calls.session.client.sync_async(self._layout.node(namespace, folder, child))
        return await self._transactions.read_entity(namespace, folder, child, what)

    async def sync_topic_keys(self, namespace: str, exchange: str) -> frozenset[str]:
        what = f"list the routing keys of exchange {exchange!r}"
        prefix = encode_name(exchange) + SEPARATOR
        # All of an exchange's keys are in its bucket (paths.bucket_for).
        bucket = bucket_for(Folder.TOPIC_KEYS, prefix)
        path = self._layout.bucket(namespace, Folder.TOPIC_KEYS, bucket)
        keys: set[str] = set()
        for child in await self._calls.synced_children(path, what):
            if child.startswith(prefix):
                key = TopicKey(exchange, decode_topic_key(child)[1])
                keys.add(key.routing_key)
                self._learn_topic_key(namespace, child, key)
        return frozenset(keys)

    def _learn_topic_key(self, namespace: str, child: str, key: TopicKey) -> None:
        self._watcher.own(namespace, lambda m: m.learned(Folder.TOPIC_KEYS, child, key))

    async def sync_bindings_of(self, namespace: str, exchange: str) -> frozenset[tuple[str, str]]:
        return (await self.sync_edges_of(namespace, exchange)).queues

    async def sync_edges_of(self, namespace: str, exchange: str) -> ExchangeEdges:
        what = f"list the bindings of exchange {exchange!r}"
        # The exchange node's children are refs named by the binding ids of its bindings: a
        # queue binding's, or (starting with ",") an exchange binding's, either way.
        path = self._layout.node(namespace, Folder.EXCHANGES, encode_name(exchange))
        queues: set[tuple[str, str]] = set()
        outgoing: set[tuple[str, str]] = set()
        incoming: set[tuple[str, str]] = set()
        for child in await self._calls.synced_children(path, what):
            with contextlib.suppress(ValueError):  # not ours: ignored, as everywhere
                if is_exchange_binding_id(child):
                    edge = decode_exchange_binding_id(child)
                    if edge.source == exchange:
                        outgoing.add((edge.destination, edge.routing_key))
                    if edge.destination == exchange:
                        incoming.add((edge.source, edge.routing_key))
                else:
                    parsed = decode_binding_id(child)
                    queues.add((parsed.queue, parsed.routing_key))
        return ExchangeEdges(frozenset(queues), frozenset(outgoing), frozenset(incoming))

    async def sync_has_exchange_bindings(self, namespace: str) -> bool:
        what = "look for exchange bindings"
        await self._calls.prepare(what)
        # An exchange binding's create makes its bucket first (ensure_parents), and buckets
        # are never deleted (but with the namespace): a folder without buckets never had one.
        # At most 256 two-letter names, where sync_edges_of lists every binding of an
        # exchange. No sync: read right after a write of our own (see sync_topic_key).
        folder = f"{self._layout.namespace(namespace)}/{Folder.EXCHANGE_BINDINGS.value}"
        return bool(await self._calls.children(folder, what))

    async def list_namespaces(self) -> list[str]:
        path = self._layout.vhosts
        namespaces = []
        for child in await self._calls.synced_children(path, "list the namespaces"):
            try:
                namespaces.append(decode_name(child))
            except ValueError:  # put there by hand: ignored, as everywhere
                log.warning("metadata: ignoring znode %r in %s: not a name we write", child, path)
        return sorted(namespaces)
