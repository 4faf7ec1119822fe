"""The metadata store on ZooKeeper (kazoo), with per-namespace views kept current by watches.

docs/metadata.md describes the layout, the encoding, what is atomic and the fault behaviour;
this docstring says how the code is arranged.

**Threads.** kazoo runs its own threads: a connection thread (state listeners), a completion
thread (results of asynchronous calls) and a watch thread. Nothing here blocks or raises on
those threads: every callback hands its argument to trio with the captured
``TrioToken.run_sync_soon`` (dropping it if the trio run is over) and returns. All kazoo calls
are made from the trio thread, so the order in which they are issued is the order in which the
server sees them.

**Order.** ZooKeeper answers one session's requests in order, and kazoo's completion thread
runs the callbacks in that order, so answers reach trio (a FIFO) in server order. Every answer
is *applied* (to the mirror, the view) right there, in a ``run_sync_soon`` callback, never
later in the task that awaits it: a task resumes after other callbacks have run, and applying
its answer then could put an older state over a newer one. So own writes are in the view when
the write returns, and a later watch event cannot regress them. (kazoo APIs that wrap their
result in a second AsyncResult, ``create_async`` and ``sync_async``, would reorder callbacks;
writes therefore go through ``transaction()`` even for a single create.)

**Watches.** One-shot children watches on each folder (to learn new buckets) and each bucket.
A watch event re-lists that bucket (one listing in flight per path; events meanwhile mark it
dirty), the mirror diffs the listing, and the new children's data is read with a multiRead.
Once a namespace is loaded, those reads also keep each node's Stat mtime: an entity that
enters the view reports the time since its write to ``watch_lag`` (watch_lag.py); the first
load's reads do not (100,000 queues read at start-up are not lag).

**Faults.** On SUSPENDED or LOST, writes are refused at once with ``MetadataUnavailable`` and
the views stay as they are; answers to reads issued before are ignored (an epoch counter). On
CONNECTED after either, every open namespace is re-listed (after a ``sync``, so a server that
lags behind cannot show an older state), which re-registers the watches (kazoo drops them all
when a connection drops) and repairs the mirror from the diff.

**Ephemeral records** (exclusive owners, consumers) belong to the session. When the session is
lost while this replica lives on, the new session claims them again, each only if its queue
still exists (a transaction: check the queue, create the record); a queue the leader deleted
meanwhile stays deleted. Leadership (``lead``) is an ephemeral sequential znode per namespace:
the lowest leads, each other candidate watches the one before it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import outcome
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    UnimplementedError,
    ZookeeperStoppedError,
)
from kazoo.protocol.states import EventType, KazooState
from kazoo.retry import KazooRetry

from gateway.metadata.codec import (
    ConsumerKey,
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
    is_consumed,
    mark_consumed,
    namespace_document,
    owner_child,
    queue_of_child,
    topic_key_child,
    topic_key_from_child,
)
from gateway.metadata.errors import ConditionNotMet, ConsumerConflict, MissingEntity
from gateway.metadata.kazoo_session import start_client, stop_client
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.multiread import MISSING, MultiRead
from gateway.metadata.paths import (
    BUCKETS,
    SEPARATOR,
    Folder,
    Layout,
    bucket_for,
    decode_binding_id,
    decode_name,
    decode_topic_key,
    encode_name,
)
from gateway.metadata.store import (
    REMOVE,
    DrainRecord,
    MetadataUnavailable,
    QueueCondition,
    VhostView,
)
from gateway.metadata.watch_lag import WatchLag, lag_seconds
from gateway.model.entities import PREDECLARED_EXCHANGES, Binding, Exchange, Queue

__all__ = ["ZooKeeperMetadataStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Reads per multiRead: ~100 KB answers, far below ZooKeeper's 1 MB packet limit.
READ_BATCH: Final = 500
# Operations per transaction, and their approximate size: a multi is one packet, and
# ZooKeeper refuses packets over jute.maxbuffer (1 MB by default).
TXN_OPS: Final = 900
TXN_BYTES: Final = 512 * 1024
# A compare-and-set loop gives up after this many lost races (each one means someone else
# changed the same entity meanwhile; a handful is already unusual).
ATTEMPTS: Final = 16
# Errors that say "the connection went away": the outcome of a write is then unknown.
_CONNECTION_ERRORS: Final = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    ZookeeperStoppedError,
    OperationTimeoutError,
)


@dataclass(frozen=True, slots=True)
class _Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class _Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class _SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class _Check:
    """Fails the transaction unless ``path`` exists (at ``version``; -1: any)."""

    path: str
    version: int = -1


_Op = _Create | _Delete | _SetData | _Check


def _size(op: _Op) -> int:
    return len(op.path) + 32 + (len(op.data) if isinstance(op, _Create | _SetData) else 0)


def _absent(path: str) -> list[_Op]:
    """Operations that fail the transaction (NodeExists at the first) if ``path`` exists, and
    change nothing otherwise: ZooKeeper has no "check absent", but creating and deleting a node
    within one transaction is exactly that."""
    return [_Create(path), _Delete(path)]


def _sentinel(namespace_layout: Layout, namespace: str, queue_child: str) -> list[_Op]:
    """Create and delete a child of the queue's drains bucket: nothing is left, but every
    replica's children watch on the bucket fires (a data change alone would fire none), and the
    bucket's cversion grows by two with no name changed, which makes their mirrors read the
    bucket's records again (mirror.py, "replaced entities")."""
    # "<queue>," is no name encode_name produces, so it never clashes with a record.
    path = namespace_layout.node(namespace, Folder.DRAINS, queue_child + SEPARATOR)
    return [_Create(path), _Delete(path)]


@dataclass(frozen=True, slots=True)
class _Ephemeral:
    """A record of this session, claimed again by a new session if its queue still exists."""

    namespace: str
    queue: str
    folder: Folder
    child: str
    data: bytes


@dataclass
class _QueueRecords:
    """A queue's records in the owners, consumers and drains folders, as listed."""

    owner: bool = False
    consumers: list[str] = field(default_factory=list)
    drains: list[str] = field(default_factory=list)


class _Reply(Generic[T]):
    """One answer, applied on the trio thread and awaited by one task."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: outcome.Outcome[T] | None = None


@dataclass(eq=False)
class _Namespace:
    name: str
    mirror: NamespaceMirror
    event: trio.Event = field(default_factory=trio.Event)
    signalled: int = 0
    loaded: trio.Event = field(default_factory=trio.Event)
    load_started: float = 0.0
    load_seconds: float | None = None
    # Reads in flight in the current epoch that the first load waits for.
    outstanding: int = 0
    # Paths with a listing in flight (current epoch), and paths whose watch fired meanwhile.
    inflight: set[str] = field(default_factory=set)
    dirty: set[str] = field(default_factory=set)
    # Buckets listed (so watched) in the current epoch. Not the mirror's buckets: our own
    # write into a new bucket makes the mirror know it before any listing watches it.
    watched: set[str] = field(default_factory=set)
    # When the resync after a reconnect started (None when not resyncing).
    resync_started: float | None = None


class _DrainWrites:
    """Drain records written in another write's transaction: created where there is none,
    replaced (set_data, plus a sentinel in the queue's bucket so that every replica looks
    again) where there is one. Whether one exists is the mirror's guess; a wrong guess fails
    the transaction, is corrected here, and the caller tries again."""

    def __init__(
        self,
        store: ZooKeeperMetadataStore,
        namespace: str,
        records: Mapping[tuple[str, str], DrainRecord],
    ) -> None:
        self._store = store
        self._namespace = namespace
        self._records = dict(records)
        self._children = {key: drain_child(*key) for key in records}
        mirror = store._mirror(namespace)
        self._exists = {
            key: mirror is not None and mirror.get(Folder.DRAINS, child) is not None
            for key, child in self._children.items()
        }
        self.paths = {
            store.layout.node(namespace, Folder.DRAINS, child): key
            for key, child in self._children.items()
        }

    def _replaced_queues(self) -> list[str]:
        return sorted({queue for (queue, _), exists in self._exists.items() if exists})

    def ops(self) -> list[_Op]:
        ops: list[_Op] = []
        for key, record in self._records.items():
            path = self._store.layout.node(self._namespace, Folder.DRAINS, self._children[key])
            if self._exists[key]:
                ops.append(_SetData(path, encode_drain(record)))
            else:
                ops.append(_Create(path, encode_drain(record)))
        for queue in self._replaced_queues():
            ops += _sentinel(self._store.layout, self._namespace, encode_name(queue))
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

    async def failed(self, op: _Op, error: Exception, what: str) -> None:
        key = self.paths.get(op.path)
        if key is not None and isinstance(op, _Create) and isinstance(error, NodeExistsError):
            self._exists[key] = True
        elif key is not None and isinstance(op, _SetData) and isinstance(error, NoNodeError):
            self._exists[key] = False
        elif isinstance(op, _Create) and isinstance(error, NoNodeError):
            await self._store._ensure_parents(self._namespace, op.path, what)
        else:
            raise self._store._unexpected(error, what)


def _by_queue(
    queue: str, drains: Mapping[str, DrainRecord] | None
) -> dict[tuple[str, str], DrainRecord]:
    return {(queue, topic): record for topic, record in (drains or {}).items()}


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
        self._hosts = hosts
        # Told the lag of each change other replicas made, once it is in a loaded view.
        self._watch_lag = watch_lag
        self._layout = Layout(prefix)
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._open_timeout = open_timeout
        # Reconnect quickly and keep trying: the default backs off to an hour between tries.
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=0.1, max_delay=1.0)
        self._client: Any = KazooClient(
            hosts=hosts, timeout=session_timeout, connection_retry=retry
        )
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = False
        self._closed = False
        self._start_lock = trio.Lock()
        self._open_locks: defaultdict[str, trio.Lock] = defaultdict(trio.Lock)
        self._namespaces: dict[str, _Namespace] = {}
        # Listed path -> (namespace, folder, bucket or None for the folder itself).
        self._watched: dict[str, tuple[_Namespace, Folder, str | None]] = {}
        self._epoch = 0
        self._disconnected = False
        # Set by LOST (the session expired): the next CONNECTED is a new session.
        self._session_lost = False
        self._connection_changed = trio.Event()
        self._multiread = True
        # Unique across the fleet and across restarts (a pid is reused, a random part is not).
        self._replica_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._serials = 0
        # Path -> what this session created there and must claim again after losing it.
        self._ephemerals: dict[str, _Ephemeral] = {}
        self._opened: list[str] = []
        self._opened_changed = trio.Event()

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def replica_id(self) -> str:
        return self._replica_id

    @property
    def connected(self) -> bool:
        """Whether ZooKeeper is reachable (writes are accepted): for readiness checks."""
        return self._started and not self._closed and self._client.state == KazooState.CONNECTED

    async def wait_connected(self, connected: bool = True) -> None:
        """Wait until the connection is up (or, with False, down), as seen by this store."""
        while (self._started and not self._disconnected and not self._closed) != connected:
            await self._connection_changed.wait()

    def load_seconds(self, namespace: str) -> float | None:
        """How long the first load of ``namespace`` took (None until it finished)."""
        state = self._namespaces.get(namespace)
        return None if state is None else state.load_seconds

    # ================================================================== lifecycle

    async def connect(self) -> None:
        """Connect now (otherwise the first call does); MetadataUnavailable if ZooKeeper
        cannot be reached within ``connect_timeout``."""
        if self._started:
            return
        async with self._start_lock:
            if self._started:
                return
            if self._closed:
                raise MetadataUnavailable("the metadata store is closed")
            self._token = trio.lowlevel.current_trio_token()
            await start_client(
                self._client, self._state_listener, self._hosts, self._connect_timeout
            )
            self._started = True
            self._connection_changed.set()
            self._connection_changed = trio.Event()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._connection_changed.set()
        for state in self._namespaces.values():
            self._wake(state)
        if self._started:
            await stop_client(self._client, self._state_listener)

    async def __aenter__(self) -> ZooKeeperMetadataStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ================================================================== views

    async def open(self, namespace: str) -> VhostView:
        await self.connect()
        async with self._open_locks[namespace]:
            state = self._namespaces.get(namespace)
            if state is None:
                self._check_writable(f"open namespace {namespace!r}")
                await self._ensure_paths(
                    namespace, self._layout.skeleton(namespace), f"open {namespace!r}"
                )
                state = _Namespace(namespace, NamespaceMirror(namespace))
                state.load_started = time.perf_counter()
                self._namespaces[namespace] = state
                for folder in Folder:
                    self._list_folder(state, folder, every_bucket=True)
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

    async def sync_queue(self, namespace: str, name: str) -> Queue | None:
        found = await self._sync_entity(namespace, Folder.QUEUES, name, f"look up queue {name!r}")
        assert found is None or isinstance(found, Queue)
        return found

    async def sync_exchange(self, namespace: str, name: str) -> Exchange | None:
        what = f"look up exchange {name!r}"
        found = await self._sync_entity(namespace, Folder.EXCHANGES, name, what)
        assert found is None or isinstance(found, Exchange)
        return found

    async def sync_topic_keys(self, namespace: str, exchange: str) -> frozenset[str]:
        what = f"list the routing keys of exchange {exchange!r}"
        prefix = encode_name(exchange) + SEPARATOR
        # All of an exchange's keys are in its bucket (paths.bucket_for).
        bucket = bucket_for(Folder.TOPIC_KEYS, prefix)
        path = self._layout.bucket(namespace, Folder.TOPIC_KEYS, bucket)

        def learn(child: str, key: TopicKey) -> None:
            self._own(namespace, lambda m: m.learned(Folder.TOPIC_KEYS, child, key))

        keys: set[str] = set()
        for child in await self._synced_children(path, what):
            if child.startswith(prefix):
                key = TopicKey(exchange, decode_topic_key(child)[1])
                keys.add(key.routing_key)
                learn(child, key)
        return frozenset(keys)

    async def sync_bindings_of(self, namespace: str, exchange: str) -> frozenset[tuple[str, str]]:
        what = f"list the bindings of exchange {exchange!r}"
        # The exchange node's children are refs named by the binding ids of its bindings.
        path = self._layout.node(namespace, Folder.EXCHANGES, encode_name(exchange))
        found: set[tuple[str, str]] = set()
        for child in await self._synced_children(path, what):
            with contextlib.suppress(ValueError):  # not ours: ignored, as everywhere
                parsed = decode_binding_id(child)
                found.add((parsed.queue, parsed.routing_key))
        return frozenset(found)

    async def _synced_children(self, path: str, what: str) -> list[str]:
        """The children of ``path`` after a sync (none if it does not exist): what another
        replica wrote before now, whether or not this one's watches have reported it."""
        await self._prepare(what)
        self._client.sync_async(path)  # the listing below is answered after it (same session)

        def apply(result: Any) -> list[str]:
            try:
                return list(self._value(result, what))
            except NoNodeError:
                return []

        return await self._ask(lambda: self._client.get_children_async(path), apply, what)

    async def _sync_entity(
        self, namespace: str, folder: Folder, name: str, what: str
    ) -> Exchange | Queue | None:
        """Read the node after a sync: the server we talk to may lag behind the one another
        replica wrote through, and sync makes it catch up first. The read is issued right
        after the sync on the same session, so it is answered after the sync completed (the
        sync's own answer is not awaited: kazoo reorders it)."""
        await self._prepare(what)
        child = encode_name(name)
        path = self._layout.node(namespace, folder, child)
        self._client.sync_async(path)
        return await self._read_entity(namespace, folder, child, path, what)

    async def opened(self, known: int = 0) -> list[str]:
        if len(self._opened) > known:
            await trio.lowlevel.checkpoint()
        while len(self._opened) <= known:
            if self._closed:
                raise MetadataUnavailable("the metadata store is closed")
            await self._opened_changed.wait()
        return list(self._opened)

    async def list_namespaces(self) -> list[str]:
        path = self._layout.vhosts
        namespaces = []
        for child in await self._synced_children(path, "list the namespaces"):
            try:
                namespaces.append(decode_name(child))
            except ValueError:  # put there by hand: ignored, as everywhere
                log.warning("metadata: ignoring znode %r in %s: not a name we write", child, path)
        return sorted(namespaces)

    def view(self, namespace: str) -> VhostView:
        state = self._namespaces.get(namespace)
        if state is None or not state.loaded.is_set():
            raise KeyError(f"namespace {namespace!r} is not open")
        return state.mirror.snapshot()

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        state = self._namespaces.get(namespace)
        if state is None:
            raise KeyError(f"namespace {namespace!r} is not open")
        if state.mirror.version > since_version:
            await trio.lowlevel.checkpoint()
        while state.mirror.version <= since_version:
            if self._closed:
                raise MetadataUnavailable("the metadata store is closed")
            if not self._live(state):
                raise KeyError(f"namespace {namespace!r} was deleted")
            await state.event.wait()
        return state.mirror.snapshot()

    # ================================================================== exchanges and queues

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

    async def delete_exchange(
        self,
        namespace: str,
        name: str,
        *,
        if_unused: bool = False,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        what = f"delete exchange {name!r}"
        deleted = await self._delete_entity(
            namespace,
            Folder.EXCHANGES,
            name,
            what,
            refuse_refs=if_unused,
            writes=_DrainWrites(self, namespace, drains or {}),
        )
        if deleted:
            await self._delete_topic_keys(namespace, name, what)
        return deleted

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        if queue.owner is None:
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
        return await self._create_exclusive_queue(namespace, queue)

    async def _create_exclusive_queue(self, namespace: str, queue: Queue) -> Queue:
        """The queue and its owner record in one transaction: an exclusive queue exists only
        with a live owner, until the owner's session ends (then the leader deletes it)."""
        what = f"declare exclusive queue {queue.name!r}"
        await self._prepare(what)
        child = encode_name(queue.name)
        path = self._layout.node(namespace, Folder.QUEUES, child)
        owner = owner_child(queue.name)
        owner_path = self._layout.node(namespace, Folder.OWNERS, owner)
        owner_data = encode_owner(self._replica_id, queue.owner or "")
        ops: list[_Op] = [_Create(path, encode_queue(queue)), _Create(owner_path, owner_data, True)]

        def created() -> None:
            self._ephemerals[owner_path] = _Ephemeral(
                namespace, queue.name, Folder.OWNERS, owner, owner_data
            )

            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_created(Folder.QUEUES, child, queue)
                mirror.own_created(Folder.OWNERS, owner, OwnerKey(queue.name))

            self._own(namespace, apply)

        for _ in range(ATTEMPTS):
            failure = await self._transact(what, ops, created)
            if failure is None:
                return queue
            index, error = failure
            if index == 0 and isinstance(error, NodeExistsError):
                winner = await self._read_entity(namespace, Folder.QUEUES, child, path, what)
                if winner is not None:
                    assert isinstance(winner, Queue)
                    return winner
                continue
            if isinstance(error, NoNodeError):
                await self._ensure_parents(namespace, ops[index].path, what)
                continue
            if index == 1 and isinstance(error, NodeExistsError):
                # An owner record without its queue (they are created and deleted together;
                # only a hand edit or a bug leaves one): it owns nothing, remove it.
                log.error("metadata: removing the owner record %s of no queue", owner_path)
                await self._delete_if_there(owner_path, what)
                continue
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    async def delete_queue(
        self,
        namespace: str,
        name: str,
        *,
        condition: QueueCondition | None = None,
        subscriptions: Collection[str] = (),
    ) -> bool:
        what = f"delete queue {name!r}"
        return await self._delete_entity(
            namespace,
            Folder.QUEUES,
            name,
            what,
            condition=condition,
            subscriptions=tuple(subscriptions),
        )

    # ================================================================== bindings, topic keys

    async def add_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        what = f"bind queue {binding.queue!r} to exchange {binding.exchange!r}"
        await self._prepare(what)
        child = binding_id(binding)
        writes = _DrainWrites(self, namespace, _by_queue(binding.queue, drains))
        base: list[_Op] = [
            _Create(self._layout.node(namespace, Folder.BINDINGS, child), encode_binding(binding)),
            _Create(self._ref(namespace, Folder.QUEUES, binding.queue, child)),
            _Create(self._ref(namespace, Folder.EXCHANGES, binding.exchange, child)),
        ]

        def created() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_created(Folder.BINDINGS, child, binding)
                writes.applied(mirror)

            self._own(namespace, apply)

        def exists(index: int, error: Exception) -> None:
            if index == 0 and isinstance(error, NodeExistsError):
                self._own(namespace, lambda m: m.learned(Folder.BINDINGS, child, binding))

        for _ in range(ATTEMPTS):
            ops = base + writes.ops()
            failure = await self._transact(what, ops, created, exists)
            if failure is None:
                return True
            index, error = failure
            if index >= len(base):
                await writes.failed(ops[index], error, what)
                continue
            if index == 0 and isinstance(error, NodeExistsError):
                return False
            if index == 0 and isinstance(error, NoNodeError):
                await self._ensure_parents(namespace, ops[0].path, what)
                continue
            if isinstance(error, NoNodeError):
                kind = "queue" if index == 1 else "exchange"
                raise MissingEntity(kind, binding.queue if index == 1 else binding.exchange)
            if isinstance(error, NodeExistsError):
                # A ref without its binding (only a hand edit makes one): remove it, retry.
                log.error("metadata: removing dangling binding ref %s", ops[index].path)
                await self._delete_if_there(ops[index].path, what)
                continue
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    async def remove_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        what = f"unbind queue {binding.queue!r} from exchange {binding.exchange!r}"
        await self._prepare(what)
        child = binding_id(binding)
        writes = _DrainWrites(self, namespace, _by_queue(binding.queue, drains))
        base: list[_Op] = [
            _Delete(self._layout.node(namespace, Folder.BINDINGS, child)),
            _Delete(self._ref(namespace, Folder.QUEUES, binding.queue, child)),
            _Delete(self._ref(namespace, Folder.EXCHANGES, binding.exchange, child)),
        ]

        def deleted() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                mirror.own_deleted(Folder.BINDINGS, child)
                writes.applied(mirror)

            self._own(namespace, apply)

        def absent(index: int, error: Exception) -> None:
            if index == 0 and isinstance(error, NoNodeError):
                self._own(namespace, lambda m: m.forget(Folder.BINDINGS, child))

        repaired = False
        for _ in range(ATTEMPTS):
            ops = base + writes.ops()
            failure = await self._transact(what, ops, deleted, absent)
            if failure is None:
                return True
            index, error = failure
            if index >= len(base):
                await writes.failed(ops[index], error, what)
                continue
            if index == 0 and isinstance(error, NoNodeError):
                return False
            if isinstance(error, NoNodeError) and not repaired:
                # A binding without one of its refs: only a bug or a hand edit makes one.
                # Remove what is there rather than leave a binding nobody can delete.
                log.error("metadata: binding %r in %s had no ref %s", child, namespace, ops[index])
                for op in base[1:]:
                    await self._delete_if_there(op.path, what)
                base = base[:1]
                repaired = True
                continue
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        what = f"register routing key {routing_key!r} of exchange {exchange!r}"
        await self._prepare(what)
        child = topic_key_child(exchange, routing_key)
        key = TopicKey(exchange, routing_key)
        ops: list[_Op] = [_Create(self._layout.node(namespace, Folder.TOPIC_KEYS, child))]

        def created() -> None:
            self._own(namespace, lambda m: m.own_created(Folder.TOPIC_KEYS, child, key))

        def exists(index: int, error: Exception) -> None:
            if isinstance(error, NodeExistsError):
                self._own(namespace, lambda m: m.learned(Folder.TOPIC_KEYS, child, key))

        for _ in range(ATTEMPTS):
            failure = await self._transact(what, ops, created, exists)
            if failure is None:
                return True
            _, error = failure
            if isinstance(error, NodeExistsError):
                return False
            if isinstance(error, NoNodeError):
                await self._ensure_parents(namespace, ops[0].path, what)
                continue
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    async def sync_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        what = f"look up routing key {routing_key!r} of exchange {exchange!r}"
        await self._prepare(what)
        path = self._layout.node(
            namespace, Folder.TOPIC_KEYS, topic_key_child(exchange, routing_key)
        )
        self._client.sync_async(path)  # answered before the read below (same session)
        return await self._exists(path, what)

    async def unregister_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        what = f"unregister routing key {routing_key!r} of exchange {exchange!r}"
        await self._prepare(what)
        child = topic_key_child(exchange, routing_key)

        def deleted() -> None:
            self._own(namespace, lambda m: m.own_deleted(Folder.TOPIC_KEYS, child))

        failure = await self._transact(
            what, [_Delete(self._layout.node(namespace, Folder.TOPIC_KEYS, child))], deleted
        )
        if failure is None:
            return True
        if isinstance(failure[1], NoNodeError):
            self._forget(namespace, Folder.TOPIC_KEYS, child)
            return False
        raise self._unexpected(failure[1], what)

    # ================================================================== consumers

    async def add_consumer(self, namespace: str, queue: str, *, exclusive: bool) -> str:
        """Register a consumer (an ephemeral record of this session).

        Every registration raises the queue node's version (it writes the node's data back,
        marking an auto-delete queue as consumed): a conditional delete or an exclusive
        registration that listed the consumers before it then fails its compare-and-set and
        lists again. An ordinary consumer checks in its transaction that no exclusive one
        exists; an exclusive one lists the consumers after reading the version, and writes
        at that version."""
        what = f"register a consumer of queue {queue!r}"
        await self._prepare(what)
        queue_path = self._layout.node(namespace, Folder.QUEUES, encode_name(queue))
        marker = consumer_child(queue, None, None)
        marker_path = self._layout.node(namespace, Folder.CONSUMERS, marker)
        if exclusive:
            child = marker
        else:
            self._serials += 1
            child = consumer_child(queue, self._replica_id, self._serials)
        path = self._layout.node(namespace, Folder.CONSUMERS, child)
        entity = consumer_from_child(child)
        for _ in range(ATTEMPTS):
            document = await self._read_data(queue_path, what)
            if document is None:
                raise MissingEntity("queue", queue)
            data, version = document
            queue_entity = decode_queue(encode_name(queue), data)
            written = mark_consumed(data) if queue_entity.auto_delete else data
            if exclusive:
                records = await self._queue_records(namespace, queue, what)
                if records.consumers:
                    raise ConsumerConflict(queue)
                ops: list[_Op] = [_SetData(queue_path, written, version), _Create(path, b"", True)]
            else:
                ops = [
                    *_absent(marker_path),
                    _SetData(queue_path, written),
                    _Create(path, b"", True),
                ]

            def created() -> None:
                self._ephemerals[path] = _Ephemeral(namespace, queue, Folder.CONSUMERS, child, b"")
                self._own(namespace, lambda m: m.own_created(Folder.CONSUMERS, child, entity))

            failure = await self._transact(what, ops, created)
            if failure is None:
                return child
            index, error = failure
            op = ops[index]
            if op.path == queue_path:
                if isinstance(error, NoNodeError):
                    raise MissingEntity("queue", queue)
                continue  # BadVersion: a consumer came or went since we read; again
            if op.path == marker_path and isinstance(error, NodeExistsError):
                raise ConsumerConflict(queue)
            if isinstance(error, NoNodeError):
                await self._ensure_parents(namespace, op.path, what)
                continue
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    async def remove_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        what = f"unregister a consumer of queue {queue!r}"
        await self._prepare(what)
        path = self._layout.node(namespace, Folder.CONSUMERS, consumer)
        self._ephemerals.pop(path, None)

        def deleted() -> None:
            self._own(namespace, lambda m: m.own_deleted(Folder.CONSUMERS, consumer))

        def gone(index: int, error: Exception) -> None:
            if isinstance(error, NoNodeError):
                self._forget(namespace, Folder.CONSUMERS, consumer)

        failure = await self._transact(what, [_Delete(path)], deleted, gone)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise self._unexpected(failure[1], what)

    # ================================================================== drains

    async def read_drain(
        self, namespace: str, queue: str, topic: str
    ) -> tuple[DrainRecord, int] | None:
        what = f"read the drain of queue {queue!r} on {topic!r}"
        await self._prepare(what)
        child = drain_child(queue, topic)
        document = await self._read_data(self._layout.node(namespace, Folder.DRAINS, child), what)
        if document is None:
            self._forget(namespace, Folder.DRAINS, child)
            return None
        record = decode_drain(document[0])
        self._own(
            namespace, lambda m: m.learned(Folder.DRAINS, child, DrainKey(queue, topic, record))
        )
        return record, document[1]

    async def update_drain(
        self, namespace: str, queue: str, topic: str, record: DrainRecord | None, *, version: int
    ) -> bool:
        what = f"update the drain of queue {queue!r} on {topic!r}"
        await self._prepare(what)
        child = drain_child(queue, topic)
        path = self._layout.node(namespace, Folder.DRAINS, child)
        ops: list[_Op]
        if record is None:
            ops = [_Delete(path, version)]
        else:
            ops = [
                _SetData(path, encode_drain(record), version),
                *_sentinel(self._layout, namespace, encode_name(queue)),
            ]

        def done() -> None:
            def apply(mirror: NamespaceMirror) -> None:
                if record is None:
                    mirror.own_deleted(Folder.DRAINS, child)
                else:
                    mirror.learned(Folder.DRAINS, child, DrainKey(queue, topic, record))
                    mirror.own_touched(Folder.DRAINS, encode_name(queue), 2)

            self._own(namespace, apply)

        failure = await self._transact(what, ops, done)
        if failure is None:
            return True
        if isinstance(failure[1], NoNodeError | BadVersionError):
            return False
        raise self._unexpected(failure[1], what)

    # ================================================================== leadership

    async def lead(self, namespace: str, task: Callable[[], Awaitable[None]]) -> None:
        await self.connect()
        path = self._layout.leader(namespace)
        while not self._closed:
            await self.wait_connected()
            if self._closed:
                return
            try:
                me = await self._stand(namespace, path)
            except MetadataUnavailable as error:
                log.warning("metadata: cannot stand for leader of %s: %s", namespace, error)
                with trio.move_on_after(1.0):
                    await self.wait_connected(False)
                continue
            if me is None:
                log.info("metadata: namespace %s was deleted; not standing for leader", namespace)
                return
            try:
                await self._candidacy(namespace, path, me, task)
            finally:
                with trio.CancelScope(shield=True):
                    if self.connected:
                        with contextlib.suppress(MetadataUnavailable):
                            await self._delete_if_there(f"{path}/{me}", "stand down")

    async def _stand(self, namespace: str, path: str) -> str | None:
        """Create this session's candidate node; its name (None: the namespace is gone, and
        is not created again for an election)."""
        what = f"stand for leader of {namespace!r}"
        data = json.dumps({"v": 1, "replica": self._replica_id}).encode()

        def apply(result: Any) -> str:
            return str(self._value(result, what)).rsplit("/", 1)[-1]

        for _ in range(ATTEMPTS):
            try:
                return await self._ask(
                    lambda: self._client.create_async(
                        f"{path}/c_", data, ephemeral=True, sequence=True
                    ),
                    apply,
                    what,
                )
            except NoNodeError:
                # The folder is missing (a namespace written by an older version), or the
                # whole namespace was deleted: create the folder only under an existing node.
                failure = await self._transact(what, [_Create(path)], _nothing)
                if failure is not None and isinstance(failure[1], NoNodeError):
                    return None
        raise self._too_many_races(what)

    async def _candidacy(
        self, namespace: str, path: str, me: str, task: Callable[[], Awaitable[None]]
    ) -> None:
        """Wait for our turn, lead while connected; return when our node is gone (the session
        ended) so that the caller stands again."""
        what = f"wait to lead {namespace!r}"
        while not self._closed:
            if not self.connected:
                await self.wait_connected()
                continue
            try:
                candidates = sorted(c for c in await self._children(path, what) if c[:2] == "c_")
            except MetadataUnavailable:
                continue
            if me not in candidates:
                return  # our session expired with our node
            position = candidates.index(me)
            if position == 0:
                log.info(
                    "leader: this replica (%s) now leads namespace %s", self._replica_id, namespace
                )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(task)
                    await self.wait_connected(False)
                    nursery.cancel_scope.cancel()
                if not self._closed:
                    log.warning(
                        "leader: ZooKeeper connection lost; this replica stops leading namespace "
                        "%s until it is back",
                        namespace,
                    )
                continue
            await self._watch_gone(f"{path}/{candidates[position - 1]}", what)

    async def _watch_gone(self, path: str, what: str) -> None:
        """Until ``path`` is deleted (or the connection changes: then look again)."""
        token = self._token
        assert token is not None
        gone = trio.Event()

        def watcher(event: Any) -> None:  # kazoo's watch thread
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(gone.set)

        changed = self._connection_changed

        def apply(result: Any) -> bool:
            return self._value(result, what) is not None

        try:
            exists = await self._ask(
                lambda: self._client.exists_async(path, watch=watcher), apply, what
            )
        except MetadataUnavailable:
            return
        if not exists:
            return
        async with trio.open_nursery() as nursery:

            async def wait(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, gone)
            nursery.start_soon(wait, changed)

    async def leader_of(self, namespace: str) -> str | None:
        what = f"find the leader of {namespace!r}"
        await self._prepare(what)
        path = self._layout.leader(namespace)
        candidates = sorted(c for c in await self._children(path, what) if c[:2] == "c_")
        for candidate in candidates:
            document = await self._read_data(f"{path}/{candidate}", what)
            if document is not None:
                replica = json.loads(document[0]).get("replica")
                return str(replica) if replica is not None else None
        return None

    def _claim_again(self) -> None:
        """A new session: create this replica's ephemeral records again, each only if its
        queue still exists (the leader may have deleted it while the session was gone)."""
        if self._ephemerals:
            log.info(
                "metadata: new ZooKeeper session; claiming %d owner and consumer record(s) again",
                len(self._ephemerals),
            )
        for path, record in list(self._ephemerals.items()):
            queue_child = encode_name(record.queue)
            queue_path = self._layout.node(record.namespace, Folder.QUEUES, queue_child)
            entity: OwnerKey | ConsumerKey = (
                OwnerKey(record.queue)
                if record.folder is Folder.OWNERS
                else consumer_from_child(record.child)
            )

            def claimed(
                record: _Ephemeral = record, entity: OwnerKey | ConsumerKey = entity
            ) -> None:
                self._own(
                    record.namespace, lambda m: m.own_created(record.folder, record.child, entity)
                )

            def refused(index: int, error: Exception, path: str = path) -> None:
                log.warning("metadata: could not claim %s again: %s", path, type(error).__name__)
                self._ephemerals.pop(path, None)

            with contextlib.suppress(MetadataUnavailable):
                self._submit_transaction(
                    f"claim {path} again",
                    [_Check(queue_path), _Create(path, record.data, True)],
                    claimed,
                    refused,
                )

    def _mirror(self, namespace: str) -> NamespaceMirror | None:
        state = self._namespaces.get(namespace)
        return None if state is None else state.mirror

    # ================================================================== bulk import

    async def bulk_create(
        self,
        namespace: str,
        *,
        exchanges: Iterable[Exchange] = (),
        queues: Iterable[Queue] = (),
        bindings: Iterable[Binding] = (),
        concurrency: int = 16,
    ) -> None:
        """Create many entities in batched transactions (~900 znodes each): for imports from
        another store, and benchmarks. Each batch is atomic; a batch that meets an existing
        entity is redone one entity at a time with the usual create-if-absent calls."""
        what = f"import metadata into {namespace!r}"
        await self._prepare(what)
        folders = (Folder.EXCHANGES, Folder.QUEUES, Folder.BINDINGS)
        buckets = [
            self._layout.bucket(namespace, folder, f"{index:02x}")
            for folder in folders
            for index in range(BUCKETS)
        ]
        await self._ensure_paths(namespace, [*self._layout.skeleton(namespace), *buckets], what)
        limiter = trio.CapacityLimiter(concurrency)

        async def batch(items: list[tuple[Exchange | Queue | Binding, list[_Op]]]) -> None:
            async with limiter:
                ops = [op for _, op_list in items for op in op_list]

                def created() -> None:
                    for entity, _ in items:
                        self._own_created(namespace, entity)

                failure = await self._transact(what, ops, created)
            if failure is not None:
                for entity, _ in items:
                    await self._create_any(namespace, entity)

        async def run(entities: Iterable[Exchange | Queue | Binding]) -> None:
            async with trio.open_nursery() as nursery:
                items: list[tuple[Exchange | Queue | Binding, list[_Op]]] = []
                count = size = 0
                for entity in entities:
                    ops = self._create_ops(namespace, entity)
                    items.append((entity, ops))
                    count += len(ops)
                    size += sum(_size(op) for op in ops)
                    if count >= TXN_OPS or size >= TXN_BYTES:
                        nursery.start_soon(batch, items)
                        items, count, size = [], 0, 0
                if items:
                    nursery.start_soon(batch, items)

        # Bindings need their queue and exchange: all of those first.
        await run([*exchanges, *queues])
        await run(bindings)

    async def delete_namespace(self, namespace: str, *, concurrency: int = 16) -> None:
        """Delete every znode of a namespace, in batched transactions. Not atomic, and not
        part of MetadataStore: for a vhost nobody uses any more (vhost deletion, tests,
        benchmarks). The namespace is closed on this replica first."""
        what = f"delete namespace {namespace!r}"
        await self._prepare(what)
        closing = self._namespaces.pop(namespace, None)
        if closing is not None:
            closing.event.set()  # waiters in changed() find it gone
            self._watched = {p: e for p, e in self._watched.items() if e[0] is not closing}
        root = self._layout.namespace(namespace)
        listings: dict[Folder, list[tuple[str, list[str]]]] = {}
        for folder in Folder:
            folder_path = self._layout.folder(namespace, folder)
            buckets = await self._children(folder_path, what)
            replies = [
                (bucket, self._submit_children(f"{folder_path}/{bucket}", what))
                for bucket in buckets
            ]
            listings[folder] = [(b, await self._wait(reply, what)) for b, reply in replies]
        # In three phases, so that each node is a leaf when its turn comes: bindings with
        # their refs, then entities and topic keys, then buckets.
        bindings: list[str] = []
        for _, children in listings[Folder.BINDINGS]:
            for child in children:
                bindings += [op.path for op in self._unbind_ops(namespace, child)]
        entities = [
            f"{self._layout.folder(namespace, folder)}/{bucket}/{child}"
            for folder in Folder
            if folder is not Folder.BINDINGS
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
                failure = await self._transact(what, [_Delete(path) for path in batch], _nothing)
            if failure is not None:  # something changed meanwhile: one by one
                for path in batch:
                    await self._delete_tree(path, what)

        for phase in (bindings, entities, buckets):
            async with trio.open_nursery() as nursery:
                for start in range(0, len(phase), TXN_OPS):
                    nursery.start_soon(delete, phase[start : start + TXN_OPS])
        await self._delete_tree(root, what)

    async def _children(self, path: str, what: str) -> list[str]:
        return await self._wait(self._submit_children(path, what), what)

    def _submit_children(self, path: str, what: str) -> _Reply[list[str]]:
        """List ``path`` (no watch); a missing node has no children."""

        def apply(result: Any) -> list[str]:
            try:
                return list(self._value(result, what))
            except NoNodeError:
                return []

        return self._submit(what, lambda: self._client.get_children_async(path), apply)

    async def _delete_tree(self, path: str, what: str) -> None:
        """Delete ``path`` and whatever is below it, leaves first (for stragglers only)."""
        for child in await self._children(path, what):
            await self._delete_tree(f"{path}/{child}", what)
        failure = await self._transact(what, [_Delete(path)], _nothing)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise self._unexpected(failure[1], what)

    def _create_ops(self, namespace: str, entity: Exchange | Queue | Binding) -> list[_Op]:
        if isinstance(entity, Exchange):
            path = self._layout.node(namespace, Folder.EXCHANGES, encode_name(entity.name))
            return [_Create(path, encode_exchange(entity))]
        if isinstance(entity, Queue):
            path = self._layout.node(namespace, Folder.QUEUES, encode_name(entity.name))
            return [_Create(path, encode_queue(entity))]
        child = binding_id(entity)
        return [
            _Create(self._layout.node(namespace, Folder.BINDINGS, child), encode_binding(entity)),
            _Create(self._ref(namespace, Folder.QUEUES, entity.queue, child)),
            _Create(self._ref(namespace, Folder.EXCHANGES, entity.exchange, child)),
        ]

    def _own_created(self, namespace: str, entity: Exchange | Queue | Binding) -> None:
        if isinstance(entity, Exchange):
            folder, child = Folder.EXCHANGES, encode_name(entity.name)
        elif isinstance(entity, Queue):
            folder, child = Folder.QUEUES, encode_name(entity.name)
        else:
            folder, child = Folder.BINDINGS, binding_id(entity)
        self._own(namespace, lambda m: m.own_created(folder, child, entity))

    async def _create_any(self, namespace: str, entity: Exchange | Queue | Binding) -> None:
        if isinstance(entity, Exchange):
            await self.create_exchange(namespace, entity)
        elif isinstance(entity, Queue):
            await self.create_queue(namespace, entity)
        else:
            await self.add_binding(namespace, entity)

    # ================================================================== write internals

    def _ref(self, namespace: str, folder: Folder, name: str, binding_child: str) -> str:
        """A binding's ref under its queue or exchange node."""
        return f"{self._layout.node(namespace, folder, encode_name(name))}/{binding_child}"

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
        await self._prepare(what)
        path = self._layout.node(namespace, folder, child)
        ops: list[_Op] = [_Create(path, data)]

        def created() -> None:
            self._own(namespace, lambda m: m.own_created(folder, child, entity))

        for _ in range(ATTEMPTS):
            failure = await self._transact(what, ops, created)
            if failure is None:
                return entity
            _, error = failure
            if isinstance(error, NodeExistsError):
                winner = await self._read_entity(namespace, folder, child, path, what)
                if winner is not None:
                    return winner
                continue  # deleted again before we could read it: try to create it
            if isinstance(error, NoNodeError):
                await self._ensure_parents(namespace, path, what)
                continue
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    async def _read_entity(
        self, namespace: str, folder: Folder, child: str, path: str, what: str
    ) -> Exchange | Queue | None:
        def apply(result: Any) -> Exchange | Queue | None:
            try:
                data, _stat = self._value(result, what)
            except NoNodeError:
                self._own(namespace, lambda m: m.forget(folder, child))
                return None
            entity = (decode_exchange if folder is Folder.EXCHANGES else decode_queue)(child, data)
            self._own(namespace, lambda m: m.learned(folder, child, entity))
            return entity

        return await self._ask(lambda: self._client.get_async(path), apply, what)

    async def _delete_entity(
        self,
        namespace: str,
        folder: Folder,
        name: str,
        what: str,
        *,
        refuse_refs: bool = False,
        condition: QueueCondition | None = None,
        subscriptions: tuple[str, ...] = (),
        writes: _DrainWrites | None = None,
    ) -> bool:
        """Delete a queue or an exchange with its bindings, atomically.

        The node's children are refs to its bindings, so listing them gives every binding, and
        deleting the node fails (NotEmpty) if a binding was added after the listing: then we
        list again. A cascade too big for one transaction deletes bindings in atomic batches
        first (each binding with its two refs) and the node last.

        A queue's records (owner, consumers, drains) go in the node's transaction; so do the
        ``REMOVE`` records of ``subscriptions``. The node is deleted at the version read before
        anything was listed, and every consumer registration raises that version: a consumer
        registered after our listing fails the delete (BadVersion), and we list again. That
        makes ``condition`` exact: it is checked on listings no registration has overtaken.
        """
        await self._prepare(what)
        child = encode_name(name)
        path = self._layout.node(namespace, folder, child)
        queue_records = folder is Folder.QUEUES
        owner_path = self._layout.node(namespace, Folder.OWNERS, owner_child(name))
        # Paths that made a transaction fail twice with NoNode and were checked absent: the
        # other half of a dangling ref (only a hand edit makes one). Left out from then on.
        suspects: set[str] = set()
        absent: set[str] = set()
        for _ in range(ATTEMPTS):
            read_version: int | None = None
            if condition is not None and condition is not QueueCondition.UNUSED:
                document = await self._read_data(path, what)
                if document is None:
                    self._forget(namespace, folder, child)
                    return False
                data, read_version = document
                self._check_document(name, condition, data)
            listing = await self._list_refs(namespace, folder, child, path, what)
            if listing is None:
                return False
            refs, version = listing
            if read_version is not None and version != read_version:
                continue  # a consumer came or went between the two reads
            if refuse_refs and refs:
                raise ConditionNotMet("exchange", name, "it has bindings")
            records = await self._queue_records(namespace, name, what) if queue_records else None
            if records is not None:
                self._check_records(name, condition, records)
            tail = self._tail_ops(namespace, name, path, version, records, subscriptions)
            if condition is QueueCondition.ORPHANED:
                tail[-1:-1] = _absent(owner_path)
            if writes is not None:
                tail[-1:-1] = writes.ops()
            ops: list[_Op] = []
            unbound: list[str] = []
            size = sum(_size(op) for op in tail)
            for ref in refs:
                ref_ops = [op for op in self._unbind_ops(namespace, ref) if op.path not in absent]
                if len(ops) + len(ref_ops) + len(tail) > TXN_OPS or size >= TXN_BYTES:
                    break
                ops += ref_ops
                unbound.append(ref)
                size += sum(_size(op) for op in ref_ops)
            whole = len(unbound) == len(refs)
            first_tail = len(ops)
            if whole:
                ops += tail

            def deleted(
                unbound: list[str] = unbound,
                whole: bool = whole,
                records: _QueueRecords | None = records,
            ) -> None:
                def apply(mirror: NamespaceMirror) -> None:
                    for ref in unbound:
                        mirror.own_deleted(Folder.BINDINGS, ref)
                    if not whole:
                        return
                    if records is not None:
                        self._own_records_deleted(mirror, name, records, subscriptions)
                    if writes is not None:
                        writes.applied(mirror)
                    mirror.own_deleted(folder, child)

                if whole and records is not None:
                    self._untrack(namespace, name)
                self._own(namespace, apply)

            def failed(
                index: int, error: Exception, whole: bool = whole, last: int = len(ops)
            ) -> None:
                if whole and index == last - 1 and isinstance(error, NoNodeError):
                    self._own(namespace, lambda m: m.forget(folder, child))

            failure = await self._transact(what, ops, deleted, failed)
            if failure is None:
                if whole:
                    return True
                continue  # a batch of bindings is gone; list what is left
            index, error = failure
            if whole and index == len(ops) - 1 and isinstance(error, NoNodeError):
                return False  # deleted by someone else meanwhile
            if whole and index >= first_tail:
                op = ops[index]
                if writes is not None and op.path in writes.paths:
                    await writes.failed(op, error, what)
                    continue
                owner_back = op.path == owner_path and isinstance(op, _Create)
                if owner_back and isinstance(error, NodeExistsError):
                    raise ConditionNotMet("queue", name, "its owner is alive")
                if isinstance(op, _Create) and isinstance(error, NoNodeError):
                    await self._ensure_parents(namespace, op.path, what)
                    continue
                if isinstance(error, NoNodeError | NodeExistsError | BadVersionError):
                    continue  # a record came or went meanwhile: list again
                if isinstance(error, NotEmptyError):
                    continue  # a binding came meanwhile: list again
                raise self._unexpected(error, what)
            if isinstance(error, NoNodeError):
                missing = ops[index].path
                if missing in suspects and not await self._exists(missing, what):
                    log.error("metadata: %s is missing; deleting the rest of it", missing)
                    absent.add(missing)
                suspects.add(missing)
                continue  # a binding went meanwhile: list again
            if isinstance(error, NotEmptyError | BadVersionError):
                continue  # a binding came meanwhile: list again
            raise self._unexpected(error, what)
        raise self._too_many_races(what)

    @staticmethod
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

    @staticmethod
    def _check_records(name: str, condition: QueueCondition | None, records: _QueueRecords) -> None:
        """The parts of ``condition`` the queue's records decide."""
        if condition in (QueueCondition.UNUSED, QueueCondition.ABANDONED) and records.consumers:
            raise ConditionNotMet("queue", name, "it has consumers")
        if condition is QueueCondition.ORPHANED and records.owner:
            raise ConditionNotMet("queue", name, "its owner is alive")

    def _tail_ops(
        self,
        namespace: str,
        name: str,
        path: str,
        version: int,
        records: _QueueRecords | None,
        subscriptions: tuple[str, ...],
    ) -> list[_Op]:
        """The last transaction of a delete: the queue's records, the REMOVE records of its
        subscriptions, and the node itself at the version listed."""
        tail: list[_Op] = []
        if records is not None:
            node = self._layout.node
            if records.owner:
                tail.append(_Delete(node(namespace, Folder.OWNERS, owner_child(name))))
            tail += [_Delete(node(namespace, Folder.CONSUMERS, c)) for c in records.consumers]
            tail += [_Delete(node(namespace, Folder.DRAINS, d)) for d in records.drains]
            removal = encode_drain(REMOVE)
            tail += [
                _Create(node(namespace, Folder.DRAINS, drain_child(name, topic)), removal)
                for topic in subscriptions
            ]
        tail.append(_Delete(path, version))
        return tail

    @staticmethod
    def _own_records_deleted(
        mirror: NamespaceMirror,
        name: str,
        records: _QueueRecords,
        subscriptions: tuple[str, ...],
    ) -> None:
        if records.owner:
            mirror.own_deleted(Folder.OWNERS, owner_child(name))
        for consumer in records.consumers:
            mirror.own_deleted(Folder.CONSUMERS, consumer)
        for drain in records.drains:
            mirror.own_deleted(Folder.DRAINS, drain)
        for topic in subscriptions:
            removal = DrainKey(name, topic, REMOVE)
            mirror.own_created(Folder.DRAINS, drain_child(name, topic), removal)

    async def _queue_records(self, namespace: str, name: str, what: str) -> _QueueRecords:
        """List the queue's buckets in the owners, consumers and drains folders (the three
        requests are in flight together)."""
        child = encode_name(name)
        replies = {
            folder: self._submit_children(
                self._layout.bucket(namespace, folder, bucket_for(folder, child)), what
            )
            for folder in (Folder.OWNERS, Folder.CONSUMERS, Folder.DRAINS)
        }
        listed = {folder: await self._wait(reply, what) for folder, reply in replies.items()}
        return _QueueRecords(
            owner=child in listed[Folder.OWNERS],
            consumers=[c for c in listed[Folder.CONSUMERS] if queue_of_child(c) == child],
            drains=[
                d
                for d in listed[Folder.DRAINS]
                if queue_of_child(d) == child and d != child + SEPARATOR
            ],
        )

    async def _read_data(self, path: str, what: str) -> tuple[bytes, int] | None:
        def apply(result: Any) -> tuple[bytes, int] | None:
            try:
                data, stat = self._value(result, what)
            except NoNodeError:
                return None
            return bytes(data or b""), int(stat.version)

        return await self._ask(lambda: self._client.get_async(path), apply, what)

    def _untrack(self, namespace: str, queue: str) -> None:
        """The queue is gone: its records of this session need no claiming again."""
        for path, record in list(self._ephemerals.items()):
            if record.namespace == namespace and record.queue == queue:
                del self._ephemerals[path]

    async def _list_refs(
        self, namespace: str, folder: Folder, child: str, path: str, what: str
    ) -> tuple[list[str], int] | None:
        def apply(result: Any) -> tuple[list[str], int] | None:
            try:
                refs, stat = self._value(result, what)
            except NoNodeError:
                self._own(namespace, lambda m: m.forget(folder, child))
                return None
            return list(refs), int(stat.version)

        return await self._ask(
            lambda: self._client.get_children_async(path, include_data=True), apply, what
        )

    def _unbind_ops(self, namespace: str, ref: str) -> list[_Op]:
        parsed = decode_binding_id(ref)
        return [
            _Delete(self._layout.node(namespace, Folder.BINDINGS, ref)),
            _Delete(self._ref(namespace, Folder.QUEUES, parsed.queue, ref)),
            _Delete(self._ref(namespace, Folder.EXCHANGES, parsed.exchange, ref)),
        ]

    async def _delete_topic_keys(self, namespace: str, exchange: str, what: str) -> None:
        """Best effort, after the exchange is gone: the keys this replica knows of. Topic keys
        do not depend on the exchange existing, so one registered concurrently may stay (as it
        would if registered just after the delete)."""
        state = self._namespaces.get(namespace)
        if state is None:
            return
        children = [
            child
            for child in state.mirror.children(Folder.TOPIC_KEYS)
            if topic_key_from_child(child).exchange == exchange
        ]
        for start in range(0, len(children), TXN_OPS):
            pending = children[start : start + TXN_OPS]
            for _ in range(ATTEMPTS):
                if not pending:
                    break
                ops: list[_Op] = [
                    _Delete(self._layout.node(namespace, Folder.TOPIC_KEYS, c)) for c in pending
                ]

                def deleted(batch: list[str] = pending) -> None:
                    def apply(mirror: NamespaceMirror) -> None:
                        for child in batch:
                            mirror.own_deleted(Folder.TOPIC_KEYS, child)

                    self._own(namespace, apply)

                def absent(index: int, error: Exception, batch: list[str] = pending) -> None:
                    if isinstance(error, NoNodeError):
                        self._forget(namespace, Folder.TOPIC_KEYS, batch[index])

                failure = await self._transact(what, ops, deleted, absent)
                if failure is None:
                    break
                index, error = failure
                if not isinstance(error, NoNodeError):
                    raise self._unexpected(error, what)
                pending = pending[:index] + pending[index + 1 :]

    async def _exists(self, path: str, what: str) -> bool:
        def apply(result: Any) -> bool:
            return self._value(result, what) is not None

        return await self._ask(lambda: self._client.exists_async(path), apply, what)

    async def _delete_if_there(self, path: str, what: str) -> None:
        failure = await self._transact(what, [_Delete(path)], _nothing)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise self._unexpected(failure[1], what)

    async def _ensure_parents(self, namespace: str, path: str, what: str) -> None:
        """Create the bucket of ``path`` (and the namespace's folders, if missing too).

        Buckets are created on first use: an empty vhost does not cost 1,024 znodes, nor a
        replica 1,024 listings to open it. Usually only the bucket is missing."""
        bucket = path.rsplit("/", 1)[0]
        failure = await self._transact(what, [_Create(bucket)], _nothing)
        if failure is None or isinstance(failure[1], NodeExistsError):
            return
        if not isinstance(failure[1], NoNodeError):
            raise self._unexpected(failure[1], what)
        await self._ensure_paths(namespace, [*self._layout.skeleton(namespace), bucket], what)

    async def _ensure_paths(self, namespace: str, paths: Sequence[str], what: str) -> None:
        """Create each path unless it exists. All are issued before any answer is awaited, in
        the order given: one session's requests are applied in order, so a parent listed
        before its child exists when the child is created."""
        root = self._layout.namespace(namespace)
        replies = [
            self._submit_transaction(
                what, [_Create(path, namespace_document(BUCKETS) if path == root else b"")]
            )
            for path in paths
        ]
        for reply in replies:
            failure = await self._wait(reply, what)
            if failure is not None and not isinstance(failure[1], NodeExistsError):
                raise self._unexpected(failure[1], what)

    async def _transact(
        self,
        what: str,
        ops: Sequence[_Op],
        on_success: Callable[[], None],
        on_failure: Callable[[int, Exception], None] | None = None,
    ) -> tuple[int, Exception] | None:
        """Commit ``ops`` atomically. On success ``on_success`` runs in answer order (it
        updates the view) and None is returned; otherwise ``on_failure`` runs likewise and
        (index of the failed op, its error) is returned."""
        return await self._wait(self._submit_transaction(what, ops, on_success, on_failure), what)

    def _submit_transaction(
        self,
        what: str,
        ops: Sequence[_Op],
        on_success: Callable[[], None] | None = None,
        on_failure: Callable[[int, Exception], None] | None = None,
    ) -> _Reply[tuple[int, Exception] | None]:
        # transaction() even for one create: create_async would reorder answers.
        transaction = self._client.transaction()
        for op in ops:
            if isinstance(op, _Create):
                transaction.create(op.path, op.data, ephemeral=op.ephemeral)
            elif isinstance(op, _Delete):
                transaction.delete(op.path, op.version)
            elif isinstance(op, _SetData):
                transaction.set_data(op.path, op.data, op.version)
            else:
                transaction.check(op.path, op.version)

        def apply(result: Any) -> tuple[int, Exception] | None:
            results = self._value(result, what)
            for index, item in enumerate(results):
                if isinstance(item, Exception) and not isinstance(
                    item, RolledBackError | RuntimeInconsistency
                ):
                    if on_failure is not None:
                        on_failure(index, item)
                    return index, item
            if on_success is not None:
                on_success()
            return None

        return self._submit(what, transaction.commit_async, apply)

    async def _ask(self, issue: Callable[[], Any], apply: Callable[[Any], T], what: str) -> T:
        return await self._wait(self._submit(what, issue, apply), what)

    def _submit(self, what: str, issue: Callable[[], Any], apply: Callable[[Any], T]) -> _Reply[T]:
        """Issue a kazoo call for a write; its answer is applied in order on the trio thread.
        Refused at once while ZooKeeper is unreachable (kazoo would queue it)."""
        self._check_writable(what)
        reply: _Reply[T] = _Reply()

        def on_answer(result: Any) -> None:
            reply.result = outcome.capture(apply, result)
            reply.done.set()

        self._link(issue(), on_answer)
        return reply

    async def _wait(self, reply: _Reply[T], what: str) -> T:
        """The answer, or MetadataUnavailable if none comes within ``request_timeout``."""
        with trio.move_on_after(self._request_timeout):
            await reply.done.wait()
        if reply.result is None:
            raise MetadataUnavailable(
                f"ZooKeeper did not answer within {self._request_timeout:g} s while trying to "
                f"{what}; the change may or may not have been made"
            )
        return reply.result.unwrap()

    def _value(self, result: Any, what: str) -> Any:
        try:
            return result.get_nowait()
        except _CONNECTION_ERRORS as error:
            raise MetadataUnavailable(
                f"lost the connection to ZooKeeper while trying to {what}; the change may or "
                "may not have been made"
            ) from error

    async def _prepare(self, what: str) -> None:
        await self.connect()
        self._check_writable(what)

    def _check_writable(self, what: str) -> None:
        if self._closed:
            raise MetadataUnavailable(f"cannot {what}: the metadata store is closed")
        state = self._client.state
        if state != KazooState.CONNECTED:
            raise MetadataUnavailable(
                f"cannot {what}: ZooKeeper at {self._hosts} is unreachable (connection "
                f"{state.lower()}); metadata changes are refused until it is back, while "
                "publishing and consuming go on with the entities already known"
            )

    def _unexpected(self, error: Exception, what: str) -> Exception:
        if isinstance(error, KazooException):
            return MetadataUnavailable(f"ZooKeeper refused to {what}: {type(error).__name__}")
        return error

    def _too_many_races(self, what: str) -> MetadataUnavailable:
        return MetadataUnavailable(
            f"could not {what}: it changed concurrently {ATTEMPTS} times in a row; try again"
        )

    def _forget(self, namespace: str, folder: Folder, child: str) -> None:
        self._own(namespace, lambda mirror: mirror.forget(folder, child))

    def _own(self, namespace: str, apply: Callable[[NamespaceMirror], None]) -> None:
        """Apply one of our own writes (or reads) to the namespace's view, if it is open."""
        state = self._namespaces.get(namespace)
        if state is not None:
            apply(state.mirror)
            self._wake(state)

    # ================================================================== kazoo -> trio

    def _link(self, async_result: Any, apply: Callable[[Any], None]) -> None:
        """Run ``apply(async_result)`` on the trio thread when the answer comes. Must be called
        right after issuing the request, from the trio thread (see the module docstring)."""
        token = self._token
        assert token is not None

        def done(result: Any) -> None:  # kazoo's completion thread
            # RunFinishedError: the trio run is over, nobody is left to care.
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._apply, apply, result)

        async_result.rawlink(done)

    @staticmethod
    def _apply(apply: Callable[[Any], None], result: Any) -> None:
        try:
            apply(result)
        except Exception:
            # An exception here would end the trio run; log it instead.
            log.exception("metadata: applying a ZooKeeper answer failed")

    def _state_listener(self, state: str) -> None:  # kazoo's connection thread
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(self._on_state, state)

    def _watch_listener(self, event: Any) -> None:  # kazoo's watch thread
        token = self._token
        if token is None:
            return
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(self._on_watch, event.path, event.type)

    # ================================================================== keeping views current

    def _on_state(self, state: str) -> None:
        if self._closed:
            return
        self._connection_changed.set()
        self._connection_changed = trio.Event()
        if state == KazooState.CONNECTED:
            if not self._disconnected:
                return
            self._disconnected = False
            self._epoch += 1
            log.info(
                "metadata: reconnected to ZooKeeper; resynchronising %d namespace(s)",
                len(self._namespaces),
            )
            for namespace in self._namespaces.values():
                self._resync(namespace)
            if self._session_lost:
                self._session_lost = False
                self._claim_again()
            return
        # SUSPENDED or LOST: answers to reads issued so far may never come; forget them.
        self._epoch += 1
        if state == KazooState.LOST:
            self._session_lost = True
            # After SUSPENDED too: the session (and anything ephemeral of it) is gone.
            log.warning(
                "metadata: ZooKeeper session lost (expired); metadata changes are refused and "
                "views are served from the cache until a new session is established"
            )
        elif not self._disconnected:
            log.warning(
                "metadata: ZooKeeper connection suspended; metadata changes are refused and "
                "views are served from the cache until it is back"
            )
        self._disconnected = True

    def _resync(self, state: _Namespace) -> None:
        state.resync_started = time.perf_counter()
        state.inflight.clear()
        state.dirty.clear()
        state.watched.clear()
        state.outstanding = 0
        # A server that lags behind the one we used before must catch up before we read.
        self._client.sync_async(self._layout.namespace(state.name))
        for folder in Folder:
            self._list_folder(state, folder, every_bucket=True)

    def _on_watch(self, path: str | None, event_type: str) -> None:
        if self._closed or path is None or event_type == EventType.NONE:
            return  # NONE: kazoo dropping watches on disconnect; the resync re-lists
        entry = self._watched.get(path)
        if entry is None or not self._live(entry[0]):
            return
        state, folder, bucket = entry
        if bucket is None:
            self._list_folder(state, folder, every_bucket=False)
        else:
            self._list_bucket(state, folder, bucket)

    def _list_folder(self, state: _Namespace, folder: Folder, *, every_bucket: bool) -> None:
        path = self._layout.folder(state.name, folder)
        if not every_bucket and path in state.inflight:
            state.dirty.add(path)
            return
        self._watched[path] = (state, folder, None)
        state.inflight.add(path)
        state.outstanding += 1
        epoch = self._epoch

        def apply(result: Any) -> None:
            if epoch != self._epoch or not self._live(state):
                return
            state.outstanding -= 1
            state.inflight.discard(path)
            try:
                buckets, _stat = result.get_nowait()
            except NoNodeError:
                buckets = []
            except (KazooException, OSError):
                buckets = None  # the connection went; the resync lists again
            if buckets is not None:
                state.mirror.apply_folder_listing(folder, buckets)
                for bucket in buckets:
                    bucket_path = self._layout.bucket(state.name, folder, bucket)
                    if every_bucket or bucket_path not in state.watched:
                        self._list_bucket(state, folder, bucket)
            if path in state.dirty:
                state.dirty.discard(path)
                self._list_folder(state, folder, every_bucket=False)
            self._settle(state)

        self._link(
            self._client.get_children_async(path, watch=self._watch_listener, include_data=True),
            apply,
        )

    def _list_bucket(self, state: _Namespace, folder: Folder, bucket: str) -> None:
        path = self._layout.bucket(state.name, folder, bucket)
        if path in state.inflight:
            state.dirty.add(path)
            return
        self._watched[path] = (state, folder, bucket)
        state.watched.add(path)
        state.inflight.add(path)
        state.outstanding += 1
        epoch = self._epoch

        def apply(result: Any) -> None:
            if epoch != self._epoch or not self._live(state):
                return
            state.outstanding -= 1
            state.inflight.discard(path)
            try:
                children, stat = result.get_nowait()
            except NoNodeError:
                state.mirror.apply_missing_bucket(folder, bucket)
            except (KazooException, OSError):
                pass  # the connection went; the resync lists again
            else:
                to_read = state.mirror.apply_bucket_listing(folder, bucket, children, stat.cversion)
                if to_read:
                    self._read(state, folder, to_read)
            if path in state.dirty:
                state.dirty.discard(path)
                self._list_bucket(state, folder, bucket)
            self._settle(state)

        self._link(
            self._client.get_children_async(path, watch=self._watch_listener, include_data=True),
            apply,
        )

    def _read(self, state: _Namespace, folder: Folder, children: list[str]) -> None:
        """Read the children's data, in multiReads of READ_BATCH (or one get each where the
        server has no multiRead)."""
        if not self._multiread:
            for child in children:
                self._read_one(state, folder, child)
            return
        chroot = self._client.chroot or ""
        # Reads issued before the first load finished are answered before it does (it waits
        # for every outstanding answer), so this leaves the whole load unmeasured.
        measure = self._watch_lag is not None and state.loaded.is_set()
        for start in range(0, len(children), READ_BATCH):
            batch = children[start : start + READ_BATCH]
            paths = [chroot + self._layout.node(state.name, folder, child) for child in batch]
            request = MultiRead(paths, mtimes=measure)
            state.outstanding += 1
            epoch = self._epoch

            def apply(
                result: Any,
                batch: list[str] = batch,
                epoch: int = epoch,
                request: MultiRead = request,
            ) -> None:
                if epoch != self._epoch or not self._live(state):
                    return
                state.outstanding -= 1
                try:
                    datas = result.get_nowait()
                except UnimplementedError:
                    log.warning("metadata: ZooKeeper has no multiRead; reading one node at a time")
                    self._multiread = False
                    self._read(state, folder, batch)
                except (KazooException, OSError, ValueError) as error:
                    if not isinstance(error, _CONNECTION_ERRORS):
                        log.warning("metadata: reading %d znodes failed: %r", len(batch), error)
                else:
                    mtimes = request.mtimes
                    for index, (child, data) in enumerate(zip(batch, datas, strict=True)):
                        seen = state.mirror.apply_data(
                            folder, child, None if data is MISSING else data
                        )
                        if seen and mtimes is not None:
                            self._observe_lag(mtimes[index])
                self._settle(state)

            async_result = self._client.handler.async_result()
            self._link(async_result, apply)
            # kazoo has no public way to send a request type it does not know.
            self._client._call(request, async_result)

    def _read_one(self, state: _Namespace, folder: Folder, child: str) -> None:
        state.outstanding += 1
        epoch = self._epoch
        measure = state.loaded.is_set()

        def apply(result: Any) -> None:
            if epoch != self._epoch or not self._live(state):
                return
            state.outstanding -= 1
            try:
                data, stat = result.get_nowait()
            except NoNodeError:
                state.mirror.apply_data(folder, child, None)
            except (KazooException, OSError):
                pass
            else:
                if state.mirror.apply_data(folder, child, data or b"") and measure:
                    self._observe_lag(stat.mtime)
            self._settle(state)

        self._link(self._client.get_async(self._layout.node(state.name, folder, child)), apply)

    def _observe_lag(self, mtime_ms: int | None) -> None:
        """Report the lag of a change that just entered the view (answers are applied on
        arrival, so now is when this replica's view shows it)."""
        if self._watch_lag is not None and mtime_ms is not None:
            self._watch_lag(lag_seconds(mtime_ms))

    def _settle(self, state: _Namespace) -> None:
        """After an answer: wake waiters, and finish the first load when nothing is left."""
        self._wake(state)
        if state.outstanding == 0 and state.resync_started is not None and state.loaded.is_set():
            log.info(
                "metadata: resynchronised namespace %s with ZooKeeper in %.3f s",
                state.name,
                time.perf_counter() - state.resync_started,
            )
            state.resync_started = None
        if state.outstanding == 0 and not state.loaded.is_set():
            state.load_seconds = time.perf_counter() - state.load_started
            counts = state.mirror.counts()
            log.info(
                "metadata: loaded namespace %s from ZooKeeper in %.3f s: %d exchanges, "
                "%d queues, %d bindings, %d topic keys",
                state.name,
                state.load_seconds,
                counts[Folder.EXCHANGES.value],
                counts[Folder.QUEUES.value],
                counts[Folder.BINDINGS.value],
                counts[Folder.TOPIC_KEYS.value],
            )
            state.resync_started = None
            state.loaded.set()

    def _live(self, state: _Namespace) -> bool:
        """Whether answers for ``state`` still matter (the store is open, the namespace too)."""
        return not self._closed and self._namespaces.get(state.name) is state

    def _wake(self, state: _Namespace) -> None:
        if state.mirror.version != state.signalled or self._closed:
            state.signalled = state.mirror.version
            state.event.set()
            state.event = trio.Event()


def _nothing() -> None:
    pass
