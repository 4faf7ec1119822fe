"""``ZooKeeperMetadataStore``: the ``MetadataStore`` of the fleet, assembled from its parts.

This module holds the lifecycle, the views and the consumers' choice between a plain record
and a line; every other method of the roles (roles.py) is one part's method as
it is, named here with ``served_by`` (the part's signature and docstring, no call passed on by
hand). The package docstring maps the parts.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections import defaultdict
from typing import Any

import trio
from kazoo.protocol.states import KazooState

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.paths import (
    Layout,
)
from gateway.metadata.served_by import served_by
from gateway.metadata.values import (
    MetadataUnavailable,
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
from gateway.metadata.zookeeper.synced_reads import SyncedReads
from gateway.metadata.zookeeper.transactions import EntityTransactions
from gateway.metadata.zookeeper.watcher import NamespaceWatcher
from gateway.model.consumers import Standing
from gateway.model.entities import (
    PREDECLARED_EXCHANGES,
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
        self._reads = SyncedReads(self._calls, self._watcher, self._transactions)
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

    wait_connected = served_by("_session", KazooSession.wait_connected)

    def load_seconds(self, namespace: str) -> float | None:
        """How long the first load of ``namespace`` took (None until it finished)."""
        state = self._watcher.get(namespace)
        return None if state is None else state.load_seconds

    def mirror_of(self, namespace: str) -> NamespaceMirror | None:
        """The open namespace's mirror (for benchmarks that look inside), or None."""
        return self._watcher.mirror(namespace)

    # ================================================================== lifecycle

    connect = served_by("_session", KazooSession.connect)
    aclose = served_by("_session", KazooSession.aclose)

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
        mirror = self._watcher.loaded_mirrors.get(namespace)
        if mirror is None:
            raise KeyError(f"namespace {namespace!r} is not open")
        return mirror.snapshot()

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

    # ================================================================== consumers

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

    # ================================================================== served by the parts
    # The roles' methods that one part implements as it is (served_by.py): the signature and
    # the docstring are the part's.

    # Entities
    create_exchange = served_by("_transactions", EntityTransactions.create_exchange)
    create_queue = served_by("_transactions", EntityTransactions.create_queue)
    delete_exchange = served_by("_deletes", EntityDeletes.delete_exchange)
    delete_queue = served_by("_deletes", EntityDeletes.delete_queue)

    # Entities, Bindings, TopicKeys, Views: the synced reads
    sync_queue = served_by("_reads", SyncedReads.sync_queue)
    sync_exchange = served_by("_reads", SyncedReads.sync_exchange)
    sync_topic_keys = served_by("_reads", SyncedReads.sync_topic_keys)
    sync_bindings_of = served_by("_reads", SyncedReads.sync_bindings_of)
    sync_edges_of = served_by("_reads", SyncedReads.sync_edges_of)
    sync_has_exchange_bindings = served_by("_reads", SyncedReads.sync_has_exchange_bindings)
    list_namespaces = served_by("_reads", SyncedReads.list_namespaces)

    # Bindings
    add_binding = served_by("_transactions", EntityTransactions.add_binding)
    remove_binding = served_by("_transactions", EntityTransactions.remove_binding)
    add_exchange_binding = served_by("_exchange_bindings", ExchangeBindingWrites.add)
    remove_exchange_binding = served_by("_exchange_bindings", ExchangeBindingWrites.remove)

    # TopicKeys
    register_topic_key = served_by("_transactions", EntityTransactions.register_topic_key)
    sync_topic_key = served_by("_transactions", EntityTransactions.sync_topic_key)
    unregister_topic_key = served_by("_transactions", EntityTransactions.unregister_topic_key)

    # Consumers: the lines of single-active-consumer queues
    activate_consumer = served_by("_lines", ConsumerLines.activate)
    deactivate_consumer = served_by("_lines", ConsumerLines.deactivate)
    in_line = served_by("_lines", ConsumerLines.holds)

    # Drains
    read_drain = served_by("_transactions", EntityTransactions.read_drain)
    update_drain = served_by("_transactions", EntityTransactions.update_drain)

    # Leadership
    lead = served_by("_leadership", Leadership.lead)
    leader_of = served_by("_leadership", Leadership.leader_of)
    live_replicas = served_by("_leadership", Leadership.replicas)

    # Deliveries
    record_deliveries = served_by("_deliveries", DeliveryRecords.write)
    follow_deliveries = served_by("_deliveries", DeliveryRecords.follow)
    delivery_recorders = served_by("_deliveries", DeliveryRecords.recorders)
    drop_deliveries = served_by("_deliveries", DeliveryRecords.drop)

    # Not part of MetadataStore: for imports, benchmarks and `vhosts delete`
    bulk_create = served_by("_admin", NamespaceAdmin.bulk_create)
    delete_namespace = served_by("_admin", NamespaceAdmin.delete_namespace)
