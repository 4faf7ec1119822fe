"""``ZooKeeperMetadataStore``: the ``MetadataStore`` of the fleet, assembled from its parts.

This module holds the lifecycle, the views and the reads; every write goes to the module that
owns it (see the package docstring for the map), so that the store's public methods here are
the whole surface the rest of the gateway uses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any

import trio
from kazoo.protocol.states import KazooState

from gateway.metadata.codec import TopicKey
from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.paths import (
    SEPARATOR,
    Folder,
    Layout,
    bucket_for,
    decode_binding_id,
    decode_exchange_binding_id,
    decode_name,
    decode_topic_key,
    encode_name,
    is_exchange_binding_id,
)
from gateway.metadata.store import (
    DrainRecord,
    ExchangeEdges,
    MetadataUnavailable,
    PickActive,
    QueueCondition,
    VhostView,
)
from gateway.metadata.watch_lag import WatchLag
from gateway.metadata.zookeeper.admin import NamespaceAdmin
from gateway.metadata.zookeeper.calls import KazooCalls
from gateway.metadata.zookeeper.deletes import EntityDeletes
from gateway.metadata.zookeeper.deliveries import DeliveryRecords
from gateway.metadata.zookeeper.exchange_bindings import ExchangeBindingWrites
from gateway.metadata.zookeeper.leadership import Leadership
from gateway.metadata.zookeeper.lines import ConsumerLines
from gateway.metadata.zookeeper.reclaim import EphemeralRecords
from gateway.metadata.zookeeper.transactions import EntityTransactions
from gateway.metadata.zookeeper.watcher import NamespaceWatcher
from gateway.model.consumers import Standing
from gateway.model.entities import (
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeBinding,
    Queue,
)

__all__ = ["ZooKeeperMetadataStore"]

log = logging.getLogger(__name__)


class ZooKeeperMetadataStore:
    """``MetadataStore`` on ZooKeeper. Connects on first use (or ``await connect()``)."""

    def __init__(
        self,
        hosts: str,
        *,
        session_timeout: float = 30,
        prefix: str = "/starlight-rabbitmq",
        request_timeout: float = 10.0,
        connect_timeout: float = 15.0,
        open_timeout: float = 300.0,
        watch_lag: WatchLag | None = None,
    ) -> None:
        self._layout = Layout(prefix)
        self._open_timeout = open_timeout
        # Unique across the fleet and across restarts (a pid is reused, a random part is not).
        self._replica_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._session = KazooSession(
            hosts,
            owner="metadata store",
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            on_disconnected=self._on_disconnected,
            on_reconnected=self._on_reconnected,
            on_closing=self._on_closing,
        )
        self._calls = KazooCalls(self._session, self._layout)
        self._watcher = NamespaceWatcher(self._session, self._layout, watch_lag)
        self._ephemerals = EphemeralRecords(self._calls, self._watcher)
        self._transactions = EntityTransactions(
            self._calls, self._watcher, self._ephemerals, self._replica_id
        )
        self._deletes = EntityDeletes(self._calls, self._watcher, self._ephemerals)
        self._lines = ConsumerLines(
            self._calls, self._watcher, self._replica_id, self._transactions.next_serial
        )
        self._exchange_bindings = ExchangeBindingWrites(self._calls, self._transactions)
        self._leadership = Leadership(self._session, self._calls, self._replica_id)
        self._deliveries = DeliveryRecords(self._session, self._calls, self._replica_id)
        self._admin = NamespaceAdmin(self._calls, self._watcher, self._transactions)
        self._open_locks: defaultdict[str, trio.Lock] = defaultdict(trio.Lock)
        self._opened: list[str] = []
        self._opened_changed = trio.Event()

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def replica_id(self) -> str:
        return self._replica_id

    @property
    def _client(self) -> Any:
        """The kazoo client (for tests that need this store's own session)."""
        return self._session.client

    @property
    def connected(self) -> bool:
        """Whether ZooKeeper is reachable (writes are accepted): for readiness checks."""
        return self._session.connected

    async def wait_connected(self, connected: bool = True) -> None:
        """Wait until the connection is up (or, with False, down), as seen by this store."""
        await self._session.wait_connected(connected)

    def load_seconds(self, namespace: str) -> float | None:
        """How long the first load of ``namespace`` took (None until it finished)."""
        state = self._watcher.get(namespace)
        return None if state is None else state.load_seconds

    def mirror_of(self, namespace: str) -> NamespaceMirror | None:
        """The open namespace's mirror (for benchmarks that look inside), or None."""
        return self._watcher.mirror(namespace)

    # ================================================================== lifecycle

    async def connect(self) -> None:
        """Connect now (otherwise the first call does); MetadataUnavailable if ZooKeeper
        cannot be reached within ``connect_timeout``."""
        await self._session.connect()

    async def aclose(self) -> None:
        await self._session.aclose()

    async def __aenter__(self) -> ZooKeeperMetadataStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _on_closing(self) -> None:
        # Waiters in changed() and opened() find the store closed.
        self._opened_changed.set()
        self._watcher.closing()
        self._watcher.wake_all()

    def _on_disconnected(self, state: str, was_connected: bool) -> None:
        """SUSPENDED or LOST: writes are refused (KazooCalls), the views stay as they are."""
        self._watcher.disconnected()
        if state == KazooState.LOST:
            # After SUSPENDED too: the session (and anything ephemeral of it) is gone.
            log.warning(
                "metadata: ZooKeeper session lost (expired); metadata changes are refused and "
                "views are served from the cache until a new session is established"
            )
        elif was_connected:
            log.warning(
                "metadata: ZooKeeper connection suspended; metadata changes are refused and "
                "views are served from the cache until it is back"
            )

    def _on_reconnected(self, new_session: bool) -> None:
        self._watcher.resync_all()
        if new_session:
            self._ephemerals.claim_again()
            self._lines.forget_session()

    # ================================================================== views

    async def open(self, namespace: str) -> VhostView:
        await self.connect()
        async with self._open_locks[namespace]:
            state = self._watcher.get(namespace)
            if state is None:
                what = f"open namespace {namespace!r}"
                self._calls.check_writable(what)
                await self._calls.ensure_paths(
                    namespace, self._layout.skeleton(namespace), f"open {namespace!r}"
                )
                state = self._watcher.start(namespace)
            with trio.move_on_after(self._open_timeout):
                await state.loaded.wait()
            if not state.loaded.is_set():
                raise MetadataUnavailable(
                    f"loading namespace {namespace!r} from ZooKeeper did not finish within "
                    f"{self._open_timeout:g} s"
                )
            # Every vhost has these (rabbit_vhost creates them with the vhost).
            present = state.mirror.snapshot().exchanges
            for exchange in PREDECLARED_EXCHANGES:
                if exchange.name not in present:
                    await self.create_exchange(namespace, exchange)
            if namespace not in self._opened:
                self._opened.append(namespace)
                self._opened_changed.set()
                self._opened_changed = trio.Event()
            return state.mirror.snapshot()

    async def opened(self, known: int = 0) -> list[str]:
        if len(self._opened) > known:
            await trio.lowlevel.checkpoint()
        while len(self._opened) <= known:
            if self._session.closed:
                raise MetadataUnavailable("the metadata store is closed")
            await self._opened_changed.wait()
        return list(self._opened)

    def view(self, namespace: str) -> VhostView:
        state = self._watcher.get(namespace)
        if state is None or not state.loaded.is_set():
            raise KeyError(f"namespace {namespace!r} is not open")
        return state.mirror.snapshot()

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        state = self._watcher.get(namespace)
        if state is None:
            raise KeyError(f"namespace {namespace!r} is not open")
        if state.mirror.version > since_version:
            await trio.lowlevel.checkpoint()
        while state.mirror.version <= since_version:
            if self._session.closed:
                raise MetadataUnavailable("the metadata store is closed")
            if not self._watcher.live(state):
                raise KeyError(f"namespace {namespace!r} was deleted")
            await state.event.wait()
        return state.mirror.snapshot()

    # ================================================================== synced reads

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
        self._session.client.sync_async(self._layout.node(namespace, folder, child))
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

    # ================================================================== writes (transactions.py)

    async def create_exchange(self, namespace: str, exchange: Exchange) -> Exchange:
        return await self._transactions.create_exchange(namespace, exchange)

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        return await self._transactions.create_queue(namespace, queue)

    async def add_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        return await self._transactions.add_binding(namespace, binding, drains=drains)

    async def remove_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        return await self._transactions.remove_binding(namespace, binding, drains=drains)

    async def add_exchange_binding(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        return await self._exchange_bindings.add(namespace, binding, drains=drains)

    async def remove_exchange_binding(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        return await self._exchange_bindings.remove(namespace, binding, drains=drains)

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        return await self._transactions.register_topic_key(namespace, exchange, routing_key)

    async def sync_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        return await self._transactions.sync_topic_key(namespace, exchange, routing_key)

    async def unregister_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        return await self._transactions.unregister_topic_key(namespace, exchange, routing_key)

    async def add_consumer(
        self, namespace: str, queue: str, *, exclusive: bool, standing: Standing | None = None
    ) -> str:
        if standing is not None:
            return await self._lines.join(namespace, queue, standing)
        return await self._transactions.add_consumer(namespace, queue, exclusive=exclusive)

    async def remove_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        if self._lines.holds(namespace, consumer):
            await self._lines.leave(namespace, queue, consumer)
        else:
            await self._transactions.remove_consumer(namespace, queue, consumer)

    async def activate_consumer(self, namespace: str, queue: str, pick: PickActive) -> bool:
        return await self._lines.activate(namespace, queue, pick)

    async def deactivate_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        await self._lines.deactivate(namespace, queue, consumer)

    def in_line(self, namespace: str, consumer: str) -> bool:
        return self._lines.holds(namespace, consumer)

    async def read_drain(
        self, namespace: str, queue: str, topic: str
    ) -> tuple[DrainRecord, int] | None:
        return await self._transactions.read_drain(namespace, queue, topic)

    async def update_drain(
        self, namespace: str, queue: str, topic: str, record: DrainRecord | None, *, version: int
    ) -> bool:
        return await self._transactions.update_drain(
            namespace, queue, topic, record, version=version
        )

    # ================================================================== deletes (deletes.py)

    async def delete_exchange(
        self,
        namespace: str,
        name: str,
        *,
        if_unused: bool = False,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        return await self._deletes.delete_exchange(
            namespace, name, if_unused=if_unused, drains=drains
        )

    async def delete_queue(
        self,
        namespace: str,
        name: str,
        *,
        condition: QueueCondition | None = None,
        subscriptions: Collection[str] = (),
    ) -> bool:
        return await self._deletes.delete_queue(
            namespace, name, condition=condition, subscriptions=subscriptions
        )

    # ================================================================== leadership.py

    async def lead(self, namespace: str, task: Callable[[], Awaitable[None]]) -> None:
        await self._leadership.lead(namespace, task)

    async def leader_of(self, namespace: str) -> str | None:
        return await self._leadership.leader_of(namespace)

    async def live_replicas(self, namespace: str) -> set[str]:
        return await self._leadership.replicas(namespace)

    # ================================================================== deliveries.py

    async def record_deliveries(self, namespace: str, record: bytes | None) -> None:
        await self._deliveries.write(namespace, record)

    async def follow_deliveries(
        self, namespace: str, update: Callable[[Mapping[str, bytes]], None]
    ) -> None:
        await self._deliveries.follow(namespace, update)

    async def delivery_recorders(self, namespace: str) -> set[str]:
        return await self._deliveries.recorders(namespace)

    async def drop_deliveries(self, namespace: str, replica: str) -> None:
        await self._deliveries.drop(namespace, replica)

    # ================================================================== admin.py

    async def bulk_create(
        self,
        namespace: str,
        *,
        exchanges: Iterable[Exchange] = (),
        queues: Iterable[Queue] = (),
        bindings: Iterable[Binding] = (),
        concurrency: int = 16,
    ) -> None:
        """Create many entities in batched transactions: for imports and benchmarks."""
        await self._admin.bulk_create(
            namespace,
            exchanges=exchanges,
            queues=queues,
            bindings=bindings,
            concurrency=concurrency,
        )

    async def delete_namespace(self, namespace: str, *, concurrency: int = 16) -> None:
        """Delete every znode of a namespace (not part of MetadataStore; not atomic)."""
        await self._admin.delete_namespace(namespace, concurrency=concurrency)
