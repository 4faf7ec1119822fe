"""Per-vhost permissions of principals, RabbitMQ's way: three regular expressions.

A principal may use a vhost when it has an entry there; the entry's ``configure``, ``write``
and ``read`` patterns say which exchanges and queues it may create/delete, publish to/bind
into, and consume from/bind from (docs/authorization.md has the rule table). The patterns are
matched the way RabbitMQ's internal authorization backend matches them
(``rabbit_auth_backend_internal``: ``re:run(Name, Pattern)``): a *search* anywhere in the name,
not anchored unless the pattern anchors itself, and the empty pattern means ``^$`` (nothing).

Checks happen on every publish, so they never do I/O: each replica keeps every entry in a
cache that ZooKeeper watches keep current, and each entry remembers the answers it already
gave per (access, name). Writes (the ``starlight-rabbitmq permissions`` command) go to
ZooKeeper, compare-and-set.

ZooKeeper layout (under the metadata prefix, ``/starlight-rabbitmq`` in production)::

    <prefix>/permissions                           (folder)
    <prefix>/permissions/<vhost key>               (no data; every write bumps its version)
    <prefix>/permissions/<vhost key>/<principal>   {"v":1,"configure":"..","write":"..","read":".."}

Names are encoded with the metadata store's ``encode_name`` (reversible, readable in zkCli).
Every write is one transaction that also sets the vhost node's data with the version it read,
so two writers never both win against the same state, and a replica needs one data watch per
vhost (not one per principal) to learn about any change in it: when the watch fires it reads
the vhost's entries again, and keeps the result only if the vhost node did not change while it
read (a consistent snapshot, labelled with the node's ``mzxid``).
"""

from __future__ import annotations

import builtins
import enum
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final, NamedTuple, Protocol, TypeVar

import trio
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.protocol.states import EventType

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.paths import Layout, decode_name, encode_name
from gateway.metadata.values import MetadataUnavailable

__all__ = [
    "Access",
    "InvalidPermission",
    "MemoryPermissionStore",
    "PermissionEntry",
    "PermissionStore",
    "Permissions",
    "ZooKeeperPermissionStore",
    "serving_permissions",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_PREFIX: Final = "/starlight-rabbitmq"
FOLDER: Final = "permissions"
FORMAT_VERSION: Final = 1
# Decisions remembered per entry and access kind; past this the memo starts over (server-named
# queues make the set of names unbounded, a memo must not grow with it).
DECISION_CACHE_SIZE: Final = 4096
# A compare-and-set write gives up after this many lost races in a row.
ATTEMPTS: Final = 16
# After a failed reload (ZooKeeper answered with an error), wait this long before retrying.
RETRY_DELAY: Final = 0.5


class Access(enum.StrEnum):
    """RabbitMQ's three kinds of access to a resource (the words appear in refusals)."""

    CONFIGURE = "configure"
    WRITE = "write"
    READ = "read"


class InvalidPermission(ValueError):
    """A pattern that is not a regular expression; ``access`` names which of the three."""

    def __init__(self, access: Access, pattern: str, reason: str) -> None:
        super().__init__(f"invalid {access} pattern {pattern!r}: {reason}")
        self.access = access
        self.pattern = pattern


def _compile(access: Access, pattern: str) -> re.Pattern[str]:
    # RabbitMQ treats "" as "^$": an empty pattern grants nothing (a search for "" would
    # match every name).
    try:
        return re.compile(pattern or "^$")
    except re.error as error:
        raise InvalidPermission(access, pattern, str(error)) from None


@dataclass(frozen=True)
class Permissions:
    """One principal's patterns on one vhost. Immutable; equal when the patterns are equal.

    Each instance memoises its answers, so a replica keeps the same instance while the
    patterns stay the same (a reload that changes nothing keeps the memo warm).
    """

    configure: str
    write: str
    read: str
    _patterns: Mapping[Access, re.Pattern[str]] = field(
        init=False, repr=False, compare=False, hash=False
    )
    _decisions: Mapping[Access, dict[str, bool]] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        patterns = {access: _compile(access, self.pattern(access)) for access in Access}
        object.__setattr__(self, "_patterns", MappingProxyType(patterns))
        object.__setattr__(self, "_decisions", MappingProxyType({a: {} for a in Access}))

    def pattern(self, access: Access) -> str:
        if access is Access.CONFIGURE:
            return self.configure
        if access is Access.WRITE:
            return self.write
        return self.read

    def allows(self, access: Access, name: str) -> bool:
        """Whether ``name`` (an exchange or queue; ``amq.default`` for ``""``) may be accessed."""
        decisions = self._decisions[access]
        decision = decisions.get(name)
        if decision is None:
            decision = self._patterns[access].search(name) is not None
            if len(decisions) >= DECISION_CACHE_SIZE:
                decisions.clear()
            decisions[name] = decision
        return decision

    @classmethod
    def everything(cls) -> Permissions:
        return cls(".*", ".*", ".*")


class PermissionEntry(NamedTuple):
    vhost: str
    principal: str
    permissions: Permissions


class PermissionStore(Protocol):
    """Where permissions live. ``vhost`` is a key chosen by the caller (the authorization
    layer uses the vhost's Pulsar namespace, so aliases of one vhost share permissions)."""

    def lookup(self, vhost: str, principal: str) -> Permissions | None:
        """The principal's permissions on the vhost from the local cache (no I/O); None when
        it has none. Needs ``run`` to be running for a store with a remote side."""
        ...

    async def set(self, vhost: str, principal: str, configure: str, write: str, read: str) -> None:
        """Create or replace the entry; ``InvalidPermission`` names a bad pattern. Visible
        to ``lookup`` on this replica when it returns."""
        ...

    async def clear(self, vhost: str, principal: str) -> bool:
        """Remove the entry; False if there was none."""
        ...

    async def list(self, vhost: str | None = None) -> builtins.list[PermissionEntry]:
        """Every entry (of ``vhost``, or of every vhost), sorted by vhost then principal,
        read from the store itself (not the cache)."""
        ...

    @property
    def version(self) -> int:
        """Grows whenever the cache changes."""
        ...

    async def changed(self, since_version: int) -> int:
        """Wait until ``version`` is above ``since_version``; return it."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the cache (then report started) and keep it current until cancelled."""
        ...

    async def aclose(self) -> None: ...


@asynccontextmanager
async def serving_permissions(store: PermissionStore) -> AsyncIterator[PermissionStore]:
    """``store`` with its cache loaded and kept current inside the block; closed after it.

    A failure to load (``MetadataUnavailable``) is raised as it is, not in an exception group,
    so that a caller can turn it into a one-line start-up error.
    """
    failure: MetadataUnavailable | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(store.run)
            except MetadataUnavailable as error:
                failure = error  # run() ended before it started: the nursery is empty
            else:
                yield store
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
    if failure is not None:
        raise failure


class _Versioned:
    """The change counter and its wake-up event, shared by both stores."""

    def __init__(self) -> None:
        self._version = 0
        self._event = trio.Event()
        self._closed = False

    @property
    def version(self) -> int:
        return self._version

    def _bump(self) -> None:
        self._version += 1
        self._event.set()
        self._event = trio.Event()

    async def changed(self, since_version: int) -> int:
        await trio.lowlevel.checkpoint()
        while self._version <= since_version:
            if self._closed:
                raise MetadataUnavailable("the permission store is closed")
            await self._event.wait()
        return self._version


def _sorted(entries: list[PermissionEntry]) -> list[PermissionEntry]:
    return sorted(entries, key=lambda entry: (entry.vhost, entry.principal))


# ================================================================================ memory


class MemoryPermissionStore(_Versioned):
    """In one process: for tests and for the memory backend."""

    def __init__(self) -> None:
        super().__init__()
        self._entries: dict[tuple[str, str], Permissions] = {}

    def lookup(self, vhost: str, principal: str) -> Permissions | None:
        return self._entries.get((vhost, principal))

    def put(self, vhost: str, principal: str, permissions: Permissions) -> None:
        """``set`` without the await, for callers on the trio thread that cannot await."""
        if self._entries.get((vhost, principal)) != permissions:
            self._entries[(vhost, principal)] = permissions
            self._bump()

    def remove(self, vhost: str, principal: str) -> bool:
        """``clear`` without the await."""
        if self._entries.pop((vhost, principal), None) is None:
            return False
        self._bump()
        return True

    async def set(self, vhost: str, principal: str, configure: str, write: str, read: str) -> None:
        permissions = Permissions(configure, write, read)  # validates before anything changes
        await trio.lowlevel.checkpoint()
        self.put(vhost, principal, permissions)

    async def clear(self, vhost: str, principal: str) -> bool:
        await trio.lowlevel.checkpoint()
        return self.remove(vhost, principal)

    async def list(self, vhost: str | None = None) -> builtins.list[PermissionEntry]:
        await trio.lowlevel.checkpoint()
        return _sorted(
            [
                PermissionEntry(v, principal, permissions)
                for (v, principal), permissions in self._entries.items()
                if vhost is None or v == vhost
            ]
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def aclose(self) -> None:
        self._closed = True
        self._event.set()


# ================================================================================ ZooKeeper


def permissions_root(prefix: str) -> str:
    return f"{Layout(prefix).prefix}/{FOLDER}"


def encode_permissions(permissions: Permissions) -> bytes:
    document = {
        "v": FORMAT_VERSION,
        "configure": permissions.configure,
        "write": permissions.write,
        "read": permissions.read,
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def decode_permissions(data: bytes) -> Permissions:
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("v") != FORMAT_VERSION:
        raise ValueError("not a version 1 permissions document")
    values: list[str] = []
    for access in Access:
        value = document.get(access.value)
        if not isinstance(value, str):
            raise ValueError(f"the {access} pattern is missing or not a string")
        values.append(value)
    return Permissions(*values)


@dataclass(frozen=True)
class _Snapshot:
    """One vhost's entries as read at one moment (``generation``: the vhost node's mzxid)."""

    generation: int
    entries: Mapping[str, Permissions]


_WRITE_CONFLICTS: Final = (BadVersionError, NodeExistsError, NoNodeError)


class ZooKeeperPermissionStore(_Versioned):
    """``PermissionStore`` on ZooKeeper. ``set``/``clear``/``list`` work on their own (the
    command line uses just those); ``lookup`` answers from the cache that ``run`` keeps.

    Threads: kazoo's synchronous calls run in worker threads, and its watch and
    connection-state callbacks only hand a note to trio (both through ``KazooSession``, the
    bridge the metadata store uses too). The cache is read and written on the trio thread
    alone.
    """

    def __init__(
        self,
        hosts: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        session_timeout: float = 30.0,
        connect_timeout: float = 15.0,
        request_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self._root = permissions_root(prefix)
        self._session = KazooSession(
            hosts,
            owner="permission store",
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            on_disconnected=self._on_disconnected,
            on_reconnected=self._on_reconnected,
        )
        self._snapshots: dict[str, _Snapshot] = {}
        self._flat: dict[tuple[str, str], Permissions] = {}
        # What the reloader has to do: re-list the vhosts (all of them after a reconnect, or
        # the new ones after the folder's children watch fired) and re-read some vhosts.
        self._full = False
        self._relist = False
        self._dirty: builtins.set[str] = set()
        self._wakeup = trio.Event()
        self._running = False

    @property
    def root(self) -> str:
        return self._root

    @property
    def _client(self) -> Any:
        """The kazoo client (for tests that need this store's own session)."""
        return self._session.client

    @property
    def connected(self) -> bool:
        return self._session.connected

    async def wait_connected(self, connected: bool = True) -> None:
        """Wait until the connection is up (or, with False, down), as this store saw it."""
        await self._session.wait_connected(connected)

    # ------------------------------------------------------------------ lifecycle

    async def connect(self) -> None:
        """Connect now (the first call does otherwise); MetadataUnavailable if ZooKeeper
        cannot be reached within ``connect_timeout``."""
        await self._session.connect()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._event.set()
        self._wakeup.set()
        await self._session.aclose()

    async def __aenter__(self) -> ZooKeeperPermissionStore:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ reads

    def lookup(self, vhost: str, principal: str) -> Permissions | None:
        return self._flat.get((vhost, principal))

    async def list(self, vhost: str | None = None) -> builtins.list[PermissionEntry]:
        await self.connect()
        what = "list permissions"
        if vhost is None:
            children = await self._call(self._children_or_none, what, self._root)
            vhosts = sorted(self._vhost_names(children or []))
        else:
            vhosts = [vhost]
        entries: builtins.list[PermissionEntry] = []
        for name in vhosts:
            snapshot = await self._call(self._read_vhost, what, name, False)
            if snapshot is not None:
                entries.extend(
                    PermissionEntry(name, principal, permissions)
                    for principal, permissions in snapshot.entries.items()
                )
        return _sorted(entries)

    # ------------------------------------------------------------------ writes

    async def set(self, vhost: str, principal: str, configure: str, write: str, read: str) -> None:
        data = encode_permissions(Permissions(configure, write, read))
        await self._write(vhost, principal, data, f"set permissions of {principal!r}")

    async def clear(self, vhost: str, principal: str) -> bool:
        return await self._write(vhost, principal, None, f"clear permissions of {principal!r}")

    async def _write(self, vhost: str, principal: str, data: bytes | None, what: str) -> bool:
        await self.connect()
        self._session.check_connected(what)
        changed = await self._call(self._write_sync, what, vhost, principal, data)
        if changed and self._running:
            # Own writes are visible here when the call returns (the watch would tell us a
            # moment later; a caller that sets and then connects must not race it).
            self._apply(vhost, await self._call(self._read_vhost, what, vhost, True))
        return changed

    def _write_sync(self, vhost: str, principal: str, data: bytes | None) -> bool:
        folder = self._vhost_path(vhost)
        node = f"{folder}/{encode_name(principal)}"
        if data is not None:
            self._client.ensure_path(folder)
        for _ in range(ATTEMPTS):
            try:
                _, stat = self._client.get(folder)
            except NoNodeError:
                return False  # clearing in a vhost that never had permissions
            exists = self._client.exists(node) is not None
            if data is None and not exists:
                return False
            transaction = self._client.transaction()
            # The vhost node's version guards the whole vhost: every write bumps it, so
            # nothing changed between the reads above and this commit, or it fails.
            transaction.set_data(folder, b"", version=stat.version)
            if data is None:
                transaction.delete(node)
            elif exists:
                transaction.set_data(node, data)
            else:
                transaction.create(node, data)
            failure = next(
                (
                    result
                    for result in transaction.commit()
                    if isinstance(result, Exception)
                    and not isinstance(result, RolledBackError | RuntimeInconsistency)
                ),
                None,
            )
            if failure is None:
                return True
            if not isinstance(failure, _WRITE_CONFLICTS):
                raise failure
            # Someone else wrote in this vhost meanwhile: read again and retry.
        raise MetadataUnavailable(
            f"could not write permissions in vhost {vhost!r}: it changed concurrently "
            f"{ATTEMPTS} times in a row; try again"
        )

    # ------------------------------------------------------------------ reading ZooKeeper

    def _vhost_path(self, vhost: str) -> str:
        return f"{self._root}/{encode_name(vhost)}"

    def _vhost_names(self, children: builtins.list[str]) -> builtins.set[str]:
        names: builtins.set[str] = builtins.set()
        for child in children:
            try:
                names.add(decode_name(child))
            except ValueError:
                log.warning(
                    "permissions: ignoring %s/%s: not a vhost node of ours", self._root, child
                )
        return names

    def _children_or_none(self, path: str, watch: bool = False) -> builtins.list[str] | None:
        try:
            children: builtins.list[str] = self._client.get_children(
                path, watch=self._on_root_watch if watch else None
            )
        except NoNodeError:
            return None
        return children

    def _read_vhost(self, vhost: str, watch: bool) -> _Snapshot | None:
        """A consistent snapshot of the vhost's entries, or None when it has no node.

        Every write bumps the vhost node, so equal ``mzxid`` before and after reading the
        entries means they are one state. With ``watch``, a data watch on the vhost node
        tells the reloader about the next write."""
        path = self._vhost_path(vhost)
        for _ in range(ATTEMPTS):
            try:
                _, before = self._client.get(path, watch=self._on_vhost_watch if watch else None)
                children = self._client.get_children(path)
            except NoNodeError:
                return None
            entries: dict[str, Permissions] = {}
            for child in children:
                try:
                    data, _ = self._client.get(f"{path}/{child}")
                    entries[decode_name(child)] = decode_permissions(data)
                except NoNodeError:
                    continue  # cleared meanwhile: the mzxid check below retries
                except ValueError as error:
                    log.warning("permissions: ignoring %s/%s: %s", path, child, error)
            try:
                _, after = self._client.get(path)
            except NoNodeError:
                return None
            if after.mzxid == before.mzxid:
                return _Snapshot(before.mzxid, MappingProxyType(entries))
        raise MetadataUnavailable(f"vhost {vhost!r} changed while being read, {ATTEMPTS} times")

    async def _call(self, fn: Callable[..., T], what: str, *args: Any) -> T:
        return await self._session.call_in_thread(fn, what, *args)

    # ------------------------------------------------------------------ the cache

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.connect()
        await self._call(self._client.ensure_path, "create the permissions folder", self._root)
        self._running = True
        try:
            self._full = True
            await self._reload()
            if self._full or self._relist or self._dirty:
                raise MetadataUnavailable("loading the permissions from ZooKeeper failed")
            log.info("permissions: loaded %d entries from ZooKeeper", len(self._flat))
            task_status.started()
            while not self._closed:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                if self.connected:
                    await self._reload()
        finally:
            self._running = False

    async def _reload(self) -> None:
        """Do what the watches asked for; on failure keep it to do after a delay."""
        full, relist, dirty = self._full, self._relist, self._dirty
        self._full, self._relist, self._dirty = False, False, builtins.set()
        try:
            if full or relist:
                children = await self._call(
                    self._children_or_none, "list the vhosts with permissions", self._root, True
                )
                listed = self._vhost_names(children or [])
                dirty.update(v for v in listed if full or v not in self._snapshots)
                if full:
                    dirty.update(self._snapshots)  # gone ones are found gone by reading them
            while dirty:
                vhost = min(dirty)
                snapshot = await self._call(
                    self._read_vhost, f"read the permissions of vhost {vhost!r}", vhost, True
                )
                dirty.discard(vhost)
                self._apply(vhost, snapshot)
        except MetadataUnavailable as error:
            self._full |= full
            self._relist |= relist
            self._dirty |= dirty
            if self.connected and not self._closed:
                log.warning("permissions: reloading failed (%s); retrying", error)
                await trio.sleep(RETRY_DELAY)
                self._wakeup.set()

    def _apply(self, vhost: str, snapshot: _Snapshot | None) -> None:
        """Install a snapshot unless a newer one is installed already."""
        current = self._snapshots.get(vhost)
        if snapshot is not None and current is not None:
            if snapshot.generation < current.generation:
                return  # read before a write that is already applied
            # Keep the instances that did not change: their memoised decisions stay valid.
            snapshot = _Snapshot(
                snapshot.generation,
                MappingProxyType(
                    {
                        principal: (
                            current.entries[principal]
                            if current.entries.get(principal) == permissions
                            else permissions
                        )
                        for principal, permissions in snapshot.entries.items()
                    }
                ),
            )
        old: Mapping[str, Permissions] = current.entries if current is not None else {}
        new: Mapping[str, Permissions] = snapshot.entries if snapshot is not None else {}
        if snapshot is None:
            self._snapshots.pop(vhost, None)
        else:
            self._snapshots[vhost] = snapshot
        changed = False
        for principal in old.keys() - new.keys():
            del self._flat[(vhost, principal)]
            changed = True
        for principal, permissions in new.items():
            if old.get(principal) is not permissions:
                self._flat[(vhost, principal)] = permissions
                changed = True
        if changed:
            self._bump()

    # ------------------------------------------------------------------ watches, state

    def _on_root_watch(self, event: Any) -> None:  # kazoo's watch thread
        if event.type != EventType.NONE:
            self._session.notify(self._mark, None)

    def _on_vhost_watch(self, event: Any) -> None:  # kazoo's watch thread
        path = event.path
        if event.type == EventType.NONE or not path or not path.startswith(self._root + "/"):
            return  # NONE: the session went; the reconnect reloads everything
        try:
            vhost = decode_name(path[len(self._root) + 1 :])
        except ValueError:
            return
        self._session.notify(self._mark, vhost)

    def _mark(self, vhost: str | None) -> None:
        if vhost is None:
            self._relist = True
        else:
            self._dirty.add(vhost)
        self._wakeup.set()

    def _on_reconnected(self, new_session: bool) -> None:
        # Watches may have been lost with the session, and changes made meanwhile were not
        # seen: read everything again (which also sets the watches again).
        log.info("permissions: reconnected to ZooKeeper; reloading")
        self._full = True
        self._wakeup.set()

    def _on_disconnected(self, state: str, was_connected: bool) -> None:
        if was_connected:
            log.warning(
                "permissions: ZooKeeper connection %s; checks use the cached permissions "
                "until it is back",
                str(state).lower(),
            )
