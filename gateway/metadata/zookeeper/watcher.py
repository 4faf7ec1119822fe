"""The watches that keep each open namespace's mirror (mirror.py) current.

**Persistent watch** (ZooKeeper 3.6+, persistent_watch.py). Opening a namespace first asks for
a persistent recursive watch on its node, then lists every folder and bucket once (no watch)
and reads the data of what the names do not say. From then on every node created, deleted or
changed below the namespace is one event, in server order with the answers: a deleted child
leaves the view at once; a created child whose name says everything (a binding without
arguments, a topic key, a consumer) enters it, and one whose data is needed (an exchange, a
queue, a drain) is read; a changed one is read again. Events that arrive together are applied
together: creations and reads are collected and handled in one go once the events queued on
the trio thread have run (``_flush``), or before any answer that came after them, whichever
is first (an answer is newer than the events before it), in a multiRead per folder: a child
created and deleted in one transaction (a sentinel, an "absent" check) costs nothing, and one
deleted and created again is replaced in the view (when both events were queued before the
flush ran; otherwise it is missing from the view until the read of the new one is answered).
Refs (children of entity nodes), bucket and folder nodes and the leader election's nodes are
not entities and are skipped. Events for what this replica's own transactions in flight
create or change are held back (own_writes.py): the answers apply those. A new folder needs
nothing here: every ``Folder`` is watched, listed and read alike.

**One-shot watches** (a ZooKeeper without ``addWatch``): children watches on each folder (to
learn new buckets) and each bucket. A watch event re-lists that bucket (one listing in flight
per path; events meanwhile mark it dirty), the mirror diffs the listing, and the new children's
data is read with a multiRead.

Once a namespace is loaded, the reads also keep each node's Stat mtime: an entity that enters
the view reports the time since its write to ``watch_lag`` (watch_lag.py); the first load's
reads do not (100,000 queues read at start-up are not lag), nor do entities whose name says
everything (there is nothing to read).

**Faults.** On SUSPENDED or LOST the views stay as they are, and answers to reads issued
before are ignored (an epoch counter): they may never come, or come from a server that is no
longer ours. On CONNECTED after either, the persistent watch is asked for again (the server
forgets a connection's watches; kazoo re-registers none) and every open namespace is re-listed
(after a ``sync``, so a server that lags behind cannot show an older state), which repairs the
mirror from the diff.

Own writes and reads reach the mirror through ``own``, applied in the same answer order as the
listings and events (calls.py), so neither can put an older state over a newer one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import trio
from kazoo.exceptions import KazooException, NoNodeError, UnimplementedError
from kazoo.protocol.states import EventType

from gateway.metadata.kazoo_handler import direct
from gateway.metadata.kazoo_internals import submit_call
from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.load_gc import FREEZE_FROM, LOAD_GC
from gateway.metadata.mirror import NamespaceMirror
from gateway.metadata.multiread import MISSING, Children, MultiRead
from gateway.metadata.paths import Folder, Layout
from gateway.metadata.persistent_watch import CREATED, DATA_CHANGED, DELETED
from gateway.metadata.watch_lag import WatchLag, lag_seconds
from gateway.metadata.zookeeper.calls import CONNECTION_ERRORS

log = logging.getLogger(__name__)

# Reads per multiRead: ~100 KB answers, far below ZooKeeper's 1 MB packet limit.
READ_BATCH: Final = 500


@dataclass(eq=False)
class WatchedNamespace:
    """One open namespace: its mirror, and the state of the listings that keep it current."""

    name: str
    mirror: NamespaceMirror
    # Set (and replaced) when the mirror's version moves past ``signalled``.
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
    # Persistent watch events waiting for the next _flush: children created (name-only ones
    # are put then, the others read) and children changed (read again), per folder.
    created: dict[Folder, set[str]] = field(default_factory=dict)
    changed: dict[Folder, set[str]] = field(default_factory=dict)
    deleted: dict[Folder, set[str]] = field(default_factory=dict)
    flush_scheduled: bool = False
    flush_epoch: int = 0  # the epoch of the events waiting for the flush
    # The first load holds the garbage collector off (load_gc.py) until it is done.
    holds_gc: bool = False


class NamespaceWatcher:
    """The open namespaces of one store, each kept current by watches."""

    def __init__(self, session: KazooSession, layout: Layout, watch_lag: WatchLag | None) -> None:
        self._session = session
        self._layout = layout
        # Told the lag of each change other replicas made, once it is in a loaded view.
        self._watch_lag = watch_lag
        self._namespaces: dict[str, WatchedNamespace] = {}
        # The mirrors of the open namespaces whose first load is done: what the store's
        # ``view`` reads, twice per message published and delivered (one lookup, no calls).
        self.loaded_mirrors: dict[str, NamespaceMirror] = {}
        # Namespaces whose events wait for a ``_flush`` (some may have had it since).
        self._unflushed: list[WatchedNamespace] = []
        session.before_answers(self._flush_before_answer)
        # Listed path -> (namespace, folder, bucket or None for the folder itself).
        self._watched: dict[str, tuple[WatchedNamespace, Folder, str | None]] = {}
        # Grows at every connection change; answers of an older epoch are dropped.
        self._epoch = 0
        # False once the server said it has no multiRead (ZooKeeper before 3.6).
        self._multiread = True
        # False once the server said it has no addWatch (before 3.6), or from the start when
        # kazoo's connection cannot hand the events on (kazoo_internals.py): one-shot watches.
        self._persistent = session.persistent_watches
        # Folder by its node name, for events.
        self._folders = {folder.value: folder for folder in Folder}

    # ------------------------------------------------------------------ namespaces

    def get(self, namespace: str) -> WatchedNamespace | None:
        return self._namespaces.get(namespace)

    def __len__(self) -> int:
        return len(self._namespaces)

    def start(self, namespace: str) -> WatchedNamespace:
        """Open ``namespace``: list every folder and bucket, with watches. ``loaded`` is set
        when every answer of that first load is in."""
        state = WatchedNamespace(namespace, NamespaceMirror(namespace))
        state.load_started = time.perf_counter()
        self._namespaces[namespace] = state
        self.loaded_mirrors.pop(namespace, None)
        LOAD_GC.hold()
        state.holds_gc = True
        self._watch_tree(state)
        for folder in Folder:
            self._list_folder(state, folder, every_bucket=True)
        return state

    def close(self, namespace: str) -> None:
        """Stop keeping ``namespace`` current (it is being deleted); waiters in ``changed``
        wake up and find it gone."""
        closing = self._namespaces.pop(namespace, None)
        self.loaded_mirrors.pop(namespace, None)
        if closing is not None:
            self._release_gc(closing)
            if self._persistent:
                self._session.unwatch_tree(self._layout.namespace(namespace))
            closing.event.set()
            self._watched = {p: e for p, e in self._watched.items() if e[0] is not closing}

    def closing(self) -> None:
        """The store is closing: loads that have not finished never will."""
        for state in self._namespaces.values():
            self._release_gc(state)

    @staticmethod
    def _release_gc(state: WatchedNamespace, *, loaded: int = 0) -> None:
        if state.holds_gc:
            state.holds_gc = False
            LOAD_GC.release(freeze=loaded >= FREEZE_FROM)

    def mirror(self, namespace: str) -> NamespaceMirror | None:
        state = self._namespaces.get(namespace)
        return None if state is None else state.mirror

    def own(self, namespace: str, apply: Callable[[NamespaceMirror], None]) -> None:
        """Apply one of our own writes (or reads) to the namespace's view, if it is open."""
        state = self._namespaces.get(namespace)
        if state is not None:
            apply(state.mirror)
            self.wake(state)

    def forget(self, namespace: str, folder: Folder, child: str) -> None:
        """We found ``child`` gone: out of the view too."""
        self.own(namespace, lambda mirror: mirror.forget(folder, child))

    def live(self, state: WatchedNamespace) -> bool:
        """Whether answers for ``state`` still matter (the store is open, the namespace too)."""
        return not self._session.closed and self._namespaces.get(state.name) is state

    def wake(self, state: WatchedNamespace) -> None:
        if state.mirror.version != state.signalled or self._session.closed:
            state.signalled = state.mirror.version
            state.event.set()
            state.event = trio.Event()

    def wake_all(self) -> None:
        for state in self._namespaces.values():
            self.wake(state)

    # ------------------------------------------------------------------ connection changes

    def disconnected(self) -> None:
        """Answers to reads issued so far may never come: forget them."""
        self._epoch += 1
        self._session.own_writes.clear()

    def resync_all(self) -> None:
        """Connected again: list every open namespace again (see the module docstring)."""
        self._epoch += 1
        log.info(
            "metadata: reconnected to ZooKeeper; resynchronising %d namespace(s)",
            len(self._namespaces),
        )
        for state in self._namespaces.values():
            self._resync(state)

    def _resync(self, state: WatchedNamespace) -> None:
        state.resync_started = time.perf_counter()
        state.inflight.clear()
        state.dirty.clear()
        state.watched.clear()
        state.created.clear()
        state.changed.clear()
        state.deleted.clear()
        state.outstanding = 0
        self._watch_tree(state)
        # A server that lags behind the one we used before must catch up before we read.
        self._session.client.sync_async(self._layout.namespace(state.name))
        for folder in Folder:
            self._list_folder(state, folder, every_bucket=True)

    # ------------------------------------------------------------------ persistent watch

    def _watch_tree(self, state: WatchedNamespace) -> None:
        """Ask for the namespace's persistent watch (again, after a reconnect)."""
        if not self._persistent:
            return
        root = self._layout.namespace(state.name)
        epoch = self._epoch
        start = len(root) + 1

        @direct
        def on_event(event_type: int, path: str) -> None:  # kazoo's connection thread
            # A ref (<folder>/<bucket>/<entity>/<binding id>: names hold no "/") is no entity
            # (_on_event): dropped here, before the hop to trio. Half the events of a
            # declare+bind are refs (a binding has two).
            if path.count("/", start) > 2:
                return
            self._session.notify(self._on_event, state, epoch, event_type, path)

        def apply(result: Any) -> None:
            try:
                result.get_nowait()
            except UnimplementedError:
                if self._persistent:
                    log.warning(
                        "metadata: ZooKeeper has no persistent watches (before 3.6); "
                        "following changes with one-shot watches"
                    )
                    self._persistent = False
                    self._session.unwatch_tree(root)
                    if epoch == self._epoch and self.live(state):
                        self._resync(state)
            except (KazooException, OSError):
                pass  # the connection went: the resync asks again

        self._session.link(self._session.watch_tree(root, on_event), apply)

    def _on_event(self, state: WatchedNamespace, epoch: int, event_type: int, path: str) -> None:
        """One persistent watch event, on the trio thread, in server order."""
        if epoch != self._epoch or not self.live(state):
            return
        # <namespace>/<folder>/<bucket>/<child>: anything deeper (refs) or shallower (folders,
        # buckets being created) or in another folder (the leader election) is no entity.
        parts = path[len(self._layout.namespace(state.name)) + 1 :].split("/")
        folder = self._folders.get(parts[0])
        if folder is None:
            return
        if len(parts) == 3:
            if event_type != DELETED and self._session.own_writes.hold(
                path, lambda: self._on_event(state, epoch, event_type, path)
            ):
                return
            self._child_event(state, folder, parts[1], parts[2], event_type)
        elif len(parts) == 2 and event_type == DELETED:
            state.mirror.apply_missing_bucket(folder, parts[1])
            self.wake(state)

    def _child_event(
        self, state: WatchedNamespace, folder: Folder, bucket: str, child: str, event_type: int
    ) -> None:
        mirror = state.mirror
        if event_type == CREATED:
            mirror.event_created(folder, bucket, child)
            state.created.setdefault(folder, set()).add(child)
        elif event_type == DELETED:
            mirror.event_deleted(folder, bucket, child)
            state.deleted.setdefault(folder, set()).add(child)
            for pending in (state.created, state.changed):
                children = pending.get(folder)
                if children is not None:
                    children.discard(child)
        elif event_type == DATA_CHANGED:
            state.changed.setdefault(folder, set()).add(child)
        else:
            return
        if not state.flush_scheduled:
            # After every event queued on the trio thread so far: they are applied together.
            state.flush_scheduled = True
            state.flush_epoch = self._epoch
            self._unflushed.append(state)
            self._session.notify(self._flush, state, self._epoch)

    def _flush_before_answer(self) -> None:
        """Before an answer is applied: the events that came before it first. They wait for
        their ``_flush``, which was queued behind the answer when they came in the same
        hand-over to trio; the answer, newer than them, applied first would show a newer
        state of one folder beside an older one of another (the drain records of an exchange
        deleted in one transaction, beside the exchange still there:
        tests/integration/metadata/test_contract_drains.py)."""
        if self._unflushed:
            unflushed, self._unflushed = self._unflushed, []
            for state in unflushed:
                self._flush(state, state.flush_epoch)

    def _flush(self, state: WatchedNamespace, epoch: int) -> None:
        if not state.flush_scheduled:
            return  # flushed already, before an answer
        state.flush_scheduled = False
        if epoch != self._epoch or not self.live(state):
            return
        created, state.created = state.created, {}
        changed, state.changed = state.changed, {}
        deleted, state.deleted = state.deleted, {}
        for folder in Folder:
            state.mirror.apply_deleted(folder, deleted.get(folder, ()))
            to_read = state.mirror.apply_created(folder, created.get(folder, ()))
            again = changed.get(folder)
            if again:
                to_read.update(state.mirror.present(folder, again))
            if to_read:
                self._read(state, folder, sorted(to_read))
        self.wake(state)

    # ------------------------------------------------------------------ listings

    @direct
    def _watch_listener(self, event: Any) -> None:  # kazoo's connection thread
        self._session.notify(self._on_watch, event.path, event.type)

    def _on_watch(self, path: str | None, event_type: str) -> None:
        if self._session.closed or path is None or event_type == EventType.NONE:
            return  # NONE: kazoo dropping watches on disconnect; the resync re-lists
        entry = self._watched.get(path)
        if entry is None or not self.live(entry[0]):
            return
        state, folder, bucket = entry
        if bucket is None:
            self._list_folder(state, folder, every_bucket=False)
        else:
            self._list_bucket(state, folder, bucket)

    def _list_folder(self, state: WatchedNamespace, folder: Folder, *, every_bucket: bool) -> None:
        path = self._layout.folder(state.name, folder)
        if not every_bucket and path in state.inflight:
            state.dirty.add(path)
            return

        def listed(result: Any) -> None:
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

        self._list(
            state,
            path,
            (state, folder, None),
            listed,
            lambda: self._list_folder(state, folder, every_bucket=False),
        )

    def _list_bucket(self, state: WatchedNamespace, folder: Folder, bucket: str) -> None:
        path = self._layout.bucket(state.name, folder, bucket)
        if path in state.inflight:
            state.dirty.add(path)
            return
        state.watched.add(path)

        def listed(result: Any) -> None:
            try:
                children, stat = result.get_nowait()
            except NoNodeError:
                state.mirror.apply_missing_bucket(folder, bucket)
            except (KazooException, OSError):
                pass  # the connection went; the resync lists again
            else:
                to_read = state.mirror.apply_bucket_listing(folder, bucket, children, stat.cversion)
                if to_read:
                    self._read(state, folder, to_read, bucket)

        self._list(
            state,
            path,
            (state, folder, bucket),
            listed,
            lambda: self._list_bucket(state, folder, bucket),
        )

    def _list(
        self,
        state: WatchedNamespace,
        path: str,
        entry: tuple[WatchedNamespace, Folder, str | None],
        listed: Callable[[Any], None],
        again: Callable[[], None],
    ) -> None:
        """List ``path`` (a folder or a bucket, ``entry`` in the watched table): ``listed``
        takes the result, unless a resync (a new epoch) or a close came first; ``again``
        lists it once more when it changed while it was being listed."""
        self._watched[path] = entry
        state.inflight.add(path)
        state.outstanding += 1
        epoch = self._epoch

        def apply(result: Any) -> None:
            if epoch != self._epoch or not self.live(state):
                return
            state.outstanding -= 1
            state.inflight.discard(path)
            listed(result)
            if path in state.dirty:
                state.dirty.discard(path)
                again()
            self._settle(state)

        self._session.link(self._children_async(path), apply)

    def _children_async(self, path: str) -> Any:
        """List ``path`` (children and Stat): with a one-shot watch when there is no
        persistent one, else with the faster parser of multiread.Children."""
        client = self._session.client
        if not self._persistent:
            return client.get_children_async(path, watch=self._watch_listener, include_data=True)
        async_result = client.handler.async_result()
        submit_call(client, Children((client.chroot or "") + path), async_result)
        return async_result

    # ------------------------------------------------------------------ reading new children

    def _read(
        self,
        state: WatchedNamespace,
        folder: Folder,
        children: list[str],
        bucket: str | None = None,
    ) -> None:
        """Read the children's data, in multiReads of READ_BATCH (or one get each where the
        server has no multiRead). ``bucket``: the bucket of every child, when known."""
        if not self._multiread:
            for child in children:
                self._read_one(state, folder, child)
            return
        client = self._session.client
        chroot = client.chroot or ""
        # Reads issued before the first load finished are answered before it does (it waits
        # for every outstanding answer), so this leaves the whole load unmeasured.
        measure = self._watch_lag is not None and state.loaded.is_set()
        for start in range(0, len(children), READ_BATCH):
            batch = children[start : start + READ_BATCH]
            if bucket is None:
                paths = [chroot + self._layout.node(state.name, folder, child) for child in batch]
            else:
                parent = f"{chroot}{self._layout.bucket(state.name, folder, bucket)}/"
                paths = [parent + child for child in batch]
            request = MultiRead(paths, mtimes=measure)
            state.outstanding += 1
            epoch = self._epoch

            def apply(
                result: Any,
                batch: list[str] = batch,
                epoch: int = epoch,
                request: MultiRead = request,
            ) -> None:
                if epoch != self._epoch or not self.live(state):
                    return
                state.outstanding -= 1
                try:
                    datas = result.get_nowait()
                except UnimplementedError:
                    log.warning("metadata: ZooKeeper has no multiRead; reading one node at a time")
                    self._multiread = False
                    self._read(state, folder, batch, bucket)
                except (KazooException, OSError, ValueError) as error:
                    if not isinstance(error, CONNECTION_ERRORS):
                        log.warning("metadata: reading %d znodes failed: %r", len(batch), error)
                else:
                    mtimes = request.mtimes
                    for index, (child, data) in enumerate(zip(batch, datas, strict=True)):
                        seen = state.mirror.apply_data(
                            folder, child, None if data is MISSING else data, bucket
                        )
                        if seen and mtimes is not None:
                            self._observe_lag(mtimes[index])
                self._settle(state)

            async_result = client.handler.async_result()
            self._session.link(async_result, apply)
            # kazoo has no public way to send a request type it does not know.
            submit_call(client, request, async_result)

    def _read_one(self, state: WatchedNamespace, folder: Folder, child: str) -> None:
        state.outstanding += 1
        epoch = self._epoch
        measure = state.loaded.is_set()

        def apply(result: Any) -> None:
            if epoch != self._epoch or not self.live(state):
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

        path = self._layout.node(state.name, folder, child)
        self._session.link(self._session.client.get_async(path), apply)

    def _observe_lag(self, mtime_ms: int | None) -> None:
        """Report the lag of a change that just entered the view (answers are applied on
        arrival, so now is when this replica's view shows it)."""
        if self._watch_lag is not None and mtime_ms is not None:
            self._watch_lag(lag_seconds(mtime_ms))

    def _settle(self, state: WatchedNamespace) -> None:
        """After an answer: wake waiters, and finish the first load when nothing is left."""
        self.wake(state)
        if state.outstanding == 0 and state.resync_started is not None and state.loaded.is_set():
            log.info(
                "metadata: resynchronised namespace %s with ZooKeeper in %.3f s",
                state.name,
                time.perf_counter() - state.resync_started,
            )
            state.resync_started = None
        if state.outstanding == 0 and not state.loaded.is_set():
            # The view's index is built here, in one go (NamespaceMirror.snapshot), while
            # the collector is still held off: it is most of the objects the load makes.
            state.mirror.snapshot()
            counts = state.mirror.counts()
            self._release_gc(state, loaded=sum(counts.values()))
            state.load_seconds = time.perf_counter() - state.load_started
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
            if self._namespaces.get(state.name) is state:  # not closed meanwhile
                self.loaded_mirrors[state.name] = state.mirror
