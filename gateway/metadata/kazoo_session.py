"""One ZooKeeper session driven from trio: the bridge every ZooKeeper store of the gateway
(metadata, permissions) stands on.

kazoo runs threads of its own: a connection thread (state listeners), a completion thread
(answers to asynchronous calls) and a watch thread. A callback on those threads must neither
block nor raise, and must not touch trio state, so each one only hands its argument to the
trio thread (``TrioToken.run_sync_soon``, dropped once the trio run is over) and returns.
kazoo's blocking calls (``start``, ``stop``, the synchronous API) run in worker threads.

The session also keeps the connection state as the store sees it (``disconnected``,
``session_lost``) and tells its owner about each change on the trio thread, in the order kazoo
reported them, so that a store can refuse writes while ZooKeeper is unreachable and read
everything again once it is back.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import trio
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, UnimplementedError
from kazoo.protocol.serialization import Create, Exists
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry
from kazoo.security import OPEN_ACL_UNSAFE

from gateway.metadata.kazoo_handler import TrioHandler, direct
from gateway.metadata.kazoo_internals import submit_call, usable_internals
from gateway.metadata.own_writes import OwnWrites
from gateway.metadata.persistent_watch import AddWatch, EventCallback, watching_connection
from gateway.metadata.values import MetadataUnavailable

__all__ = ["KazooSession", "chroot_ancestors"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def chroot_ancestors(chroot: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b", "/a/b/c"]``: the znodes a chroot needs, parents first."""
    parts = [part for part in chroot.split("/") if part]
    return ["/" + "/".join(parts[: depth + 1]) for depth in range(len(parts))]


def _ignore_disconnect(state: str, was_connected: bool) -> None:
    pass


def _ignore_reconnect(new_session: bool) -> None:
    pass


def _nothing() -> None:
    pass


class KazooSession:
    """A kazoo client, its lifecycle from trio, and its state changes delivered to trio.

    ``on_disconnected(state, was_connected)`` runs for every SUSPENDED or LOST (``state``),
    ``was_connected`` telling whether it is the first since the connection was up;
    ``on_reconnected(new_session)`` runs for the first CONNECTED after either, ``new_session``
    telling whether the session expired meanwhile (so its ephemeral znodes and watches are
    gone). ``on_closing()`` runs when ``aclose`` starts, with ``closed`` already true, so that
    the owner's waiters can wake up and leave before the (slow) disconnect. ``owner`` names the
    store in refusals ("the metadata store is closed").
    """

    def __init__(
        self,
        hosts: str,
        *,
        owner: str,
        session_timeout: float,
        connect_timeout: float,
        request_timeout: float,
        on_disconnected: Callable[[str, bool], None] = _ignore_disconnect,
        on_reconnected: Callable[[bool], None] = _ignore_reconnect,
        on_closing: Callable[[], None] = _nothing,
    ) -> None:
        self.hosts = hosts
        self.owner = owner
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._on_disconnected = on_disconnected
        self._on_reconnected = on_reconnected
        self._on_closing = on_closing
        # Reconnect quickly and keep trying: the default backs off to an hour between tries.
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_jitter=0.1, max_delay=1.0)
        # kazoo's private parts this session uses (kazoo_internals.py): without the request
        # queue it refuses to start; without the others it uses kazoo's own handler or
        # connection (then without persistent watches: the watcher uses one-shot ones).
        trio_handler, watching = usable_internals()
        self.client: Any = KazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry=retry,
            **({"handler": TrioHandler()} if trio_handler else {}),
        )
        self._connection = watching_connection(self.client) if watching else None
        # What our transactions in flight create or change (events for them are held back).
        self.own_writes = OwnWrites()
        self._token: trio.lowlevel.TrioToken | None = None
        self.started = False
        self.closed = False
        self._start_lock = trio.Lock()
        # Set by SUSPENDED or LOST, cleared by the next CONNECTED.
        self.disconnected = False
        # Set by LOST (the session expired): the next CONNECTED is a new session.
        self.session_lost = False
        # Set (and replaced) at every state change, for tasks waiting on one.
        self.connection_changed = trio.Event()
        # Calls handed to trio and not run yet (``notify``), and whether a ``run_sync_soon``
        # that will run them is on its way.
        self._handed: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._handing = False
        # Called before each answer is applied (``before_answers``).
        self._before_answer: Callable[[], None] | None = None

    # ------------------------------------------------------------------ state

    @property
    def connected(self) -> bool:
        """Whether ZooKeeper is reachable now (kazoo's own state, not the last one reported)."""
        return self.started and not self.closed and self.client.state == KazooState.CONNECTED

    async def wait_connected(self, connected: bool = True) -> None:
        """Wait until the connection is up (or, with False, down), as reported to trio."""
        while (self.started and not self.disconnected and not self.closed) != connected:
            await self.connection_changed.wait()

    def check_connected(self, what: str, consequence: str = "") -> None:
        """MetadataUnavailable unless a request can be sent now: kazoo would queue it while
        disconnected, and the caller would wait for an answer that may never come."""
        if self.closed:
            raise MetadataUnavailable(f"cannot {what}: the {self.owner} is closed")
        state = self.client.state
        if state != KazooState.CONNECTED:
            raise MetadataUnavailable(
                f"cannot {what}: ZooKeeper at {self.hosts} is unreachable (connection "
                f"{str(state).lower()}){consequence}"
            )

    def _signal_connection(self) -> None:
        self.connection_changed.set()
        self.connection_changed = trio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Connect now (the first call does otherwise); MetadataUnavailable if ZooKeeper
        cannot be reached within ``connect_timeout``."""
        if self.started:
            return
        async with self._start_lock:
            if self.started:
                return
            if self.closed:
                raise MetadataUnavailable(f"the {self.owner} is closed")
            self._token = trio.lowlevel.current_trio_token()
            self.client.add_listener(self._state_listener)
            try:
                await trio.to_thread.run_sync(self._start, abandon_on_cancel=True)
            except Exception as error:
                self.client.remove_listener(self._state_listener)
                raise MetadataUnavailable(
                    f"cannot connect to ZooKeeper at {self.hosts} within "
                    f"{self.connect_timeout:g} s: {error}"
                ) from error
            self.started = True
            self._signal_connection()

    def _start(self) -> None:
        """In a worker thread: connect (kazoo's ``start`` without its warning about a missing
        chroot), then create the chroot of ``hosts`` (``host:port/chroot``) when it is missing.

        A chroot is how several fleets share one ZooKeeper (docs/fleet.md, "What makes a
        fleet"): each sees only the tree under its own. kazoo cannot create it from inside
        (its paths are all relative to the chroot), so its znodes are created with the full
        path, parents first, as Pulsar's ``initialize-cluster-metadata`` does for its own."""
        client = self.client
        client.start_async().wait(timeout=self.connect_timeout)
        if not client.connected:
            client.stop()
            client.close()
            raise client.handler.timeout_exception("Connection time-out")
        chroot = client.chroot
        if not chroot:
            return
        try:
            if self._sync_call(Exists(chroot, None)) is not None:
                return
            for path in chroot_ancestors(chroot):
                try:
                    self._sync_call(Create(path, b"", OPEN_ACL_UNSAFE, 0))
                    log.info("ZooKeeper: created the chroot node %s", path)
                except NodeExistsError:
                    pass  # another replica, or an ancestor that was there
        except Exception:
            client.stop()
            client.close()
            raise

    def _sync_call(self, request: Any) -> Any:
        """One request with its full path (not relative to the chroot), answered within
        ``request_timeout``."""
        result = self.client.handler.async_result()
        submit_call(self.client, request, result)
        return result.get(timeout=self.request_timeout)

    async def aclose(self) -> None:
        """Disconnect and release the client, even from a cancelled task. Waiters in
        ``wait_connected`` wake up and find the session closed."""
        if self.closed:
            return
        self.closed = True
        self._signal_connection()
        self._on_closing()
        if self.started:
            self.client.remove_listener(self._state_listener)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.client.stop)
                await trio.to_thread.run_sync(self.client.close)

    # ------------------------------------------------------------------ kazoo threads -> trio

    def notify(self, fn: Callable[..., None], *args: Any) -> None:
        """From any thread (kazoo's, or trio's own): run ``fn(*args)`` on the trio thread
        soon, in call order.

        One ``run_sync_soon`` hands over every call made until it runs, not one each: each
        costs a write to trio's wake-up socket on the calling thread and a pass of trio's
        queue, and under load kazoo's connection thread reads several answers and events per
        wake-up (docs/fleet.md, "Where the replica's CPU goes"). The flag is cleared *before*
        the queue is read, so a call appended after that read sees it cleared and sends
        another hand-over: none is left behind (at worst one hand-over finds nothing)."""
        token = self._token
        if token is None:
            return
        self._handed.append((fn, args))
        if self._handing:
            return
        self._handing = True
        try:
            token.run_sync_soon(self._hand_over)
        except trio.RunFinishedError:  # the trio run is over, nobody is left to care
            self._handing = False
            self._handed.clear()

    def _hand_over(self) -> None:
        """On the trio thread: run the calls handed over so far, in order. Those appended
        meanwhile (by these very calls, e.g. a group commit's flush scheduled by an answer)
        wait for the next hand-over, after the tasks woken now have run: as trio's own queue
        does, one batch per pass."""
        self._handing = False
        handed = self._handed
        for _ in range(len(handed)):
            fn, args = handed.popleft()
            fn(*args)

    def link(self, async_result: Any, apply: Callable[[Any], None]) -> None:
        """Run ``apply(async_result)`` on the trio thread when the answer comes.

        Must be called from the trio thread right after issuing the request: kazoo's
        completion thread runs callbacks in the order the server answered, and so then does
        trio (a FIFO), which is what keeps a store's view from going back in time."""
        # Direct: handed to trio from the connection thread as it reads the answer, in order.
        async_result.rawlink(direct(lambda result: self.notify(self._apply, apply, result)))

    def before_answers(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` on the trio thread before each answer linked with ``link`` is
        applied: the watcher applies the watch events that arrived before the answer but
        wait for their batch (zookeeper/watcher.py, ``_flush``), so that an answer, newer
        than them, is never applied before them. One hook per session."""
        self._before_answer = hook

    def _apply(self, apply: Callable[[Any], None], result: Any) -> None:
        try:
            if self._before_answer is not None:
                self._before_answer()
            apply(result)
        except Exception:
            # An exception here would end the trio run; log it instead.
            log.exception("applying a ZooKeeper answer failed")

    async def call_in_thread(self, fn: Callable[..., T], what: str, *args: Any) -> T:
        """Run a blocking kazoo call in a worker thread, giving up after ``request_timeout``
        (the thread is abandoned; kazoo ends it when its request times out)."""
        with trio.move_on_after(self.request_timeout):
            try:
                return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)
            except KazooException as error:
                raise MetadataUnavailable(
                    f"ZooKeeper refused to {what}: {type(error).__name__} {error}".rstrip()
                ) from error
        raise MetadataUnavailable(
            f"ZooKeeper at {self.hosts} did not answer within {self.request_timeout:g} s "
            f"while trying to {what}"
        )

    def watch_tree(self, path: str, callback: EventCallback) -> Any:
        """Ask for a persistent recursive watch on ``path``: ``callback(event type, path)``
        runs on kazoo's connection thread for every node created, deleted or changed below it
        (persistent_watch.py). Returns the kazoo result of the request (an UnimplementedError
        from ZooKeeper before 3.6). The server forgets it with the connection: ask again after
        every reconnect."""
        root = (self.client.chroot or "") + path
        result = self.client.handler.async_result()
        if self._connection is None:  # kazoo's own connection: it cannot hand the events on
            result.set_exception(
                UnimplementedError("persistent watches need kazoo's connection internals")
            )
            return result
        self._connection.persistent[root] = callback
        submit_call(self.client, AddWatch(root), result)
        return result

    @property
    def persistent_watches(self) -> bool:
        """Whether ``watch_tree`` can work with this kazoo (kazoo_internals.py); the
        ZooKeeper server may still lack ``addWatch`` (before 3.6)."""
        return self._connection is not None

    def unwatch_tree(self, path: str) -> None:
        """Stop handing on the events under ``path`` (the server's watch stays until the
        connection ends; nothing is written there any more once a namespace is deleted)."""
        if self._connection is not None:
            self._connection.persistent.pop((self.client.chroot or "") + path, None)

    def _state_listener(self, state: str) -> None:  # kazoo's connection thread
        self.notify(self._on_state, state)

    def _on_state(self, state: str) -> None:
        if self.closed:
            return
        self._signal_connection()
        if state == KazooState.CONNECTED:
            if not self.disconnected:
                return  # the first connection: connect() has reported it
            self.disconnected = False
            new_session, self.session_lost = self.session_lost, False
            self._on_reconnected(new_session)
            return
        # SUSPENDED or LOST (LOST after SUSPENDED too: the session is gone either way).
        was_connected = not self.disconnected
        if state == KazooState.LOST:
            self.session_lost = True
        self.disconnected = True
        self._on_disconnected(state, was_connected)
