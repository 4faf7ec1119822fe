"""The PermissionStore contract, on the memory store and on ZooKeeper.

For ZooKeeper every "replica" is a store of its own (its own session) under a prefix of the
test's own (deleted afterwards), with its cache running; a "writer" is a store without a cache,
as the command line uses it. For memory every replica is the one shared store.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from gateway.metadata.permissions import (
    InvalidPermission,
    MemoryPermissionStore,
    PermissionEntry,
    Permissions,
    PermissionStore,
    ZooKeeperPermissionStore,
)
from tests.integration.metadata.conftest import DEADLINE

ALL = Permissions.everything()
NONE = Permissions("", "", "")


class PermissionFleet:
    def __init__(self, kind: str, nursery: trio.Nursery, hosts: str = "", prefix: str = "") -> None:
        self.kind = kind
        self.hosts = hosts
        self.prefix = prefix
        self._nursery = nursery
        self._memory = MemoryPermissionStore()
        self._stores: list[PermissionStore] = []

    async def replica(self, hosts: str | None = None, **options: Any) -> PermissionStore:
        """A store with its cache loaded and kept current."""
        if self.kind == "memory":
            return self._memory
        store = ZooKeeperPermissionStore(hosts or self.hosts, prefix=self.prefix, **options)
        self._stores.append(store)
        await self._nursery.start(store.run)
        return store

    async def writer(self) -> PermissionStore:
        """A store without a cache (how ``starlight-rabbitmq permissions`` uses it)."""
        if self.kind == "memory":
            return self._memory
        store = ZooKeeperPermissionStore(self.hosts, prefix=self.prefix)
        self._stores.append(store)
        return store

    async def aclose(self) -> None:
        for store in self._stores:
            await store.aclose()


@pytest.fixture(params=["memory", pytest.param("zookeeper", marks=pytest.mark.integration)])
async def fleet(request: pytest.FixtureRequest) -> AsyncIterator[PermissionFleet]:
    async with trio.open_nursery() as nursery:
        if request.param == "memory":
            fleet = PermissionFleet("memory", nursery)
        else:
            fleet = PermissionFleet(
                "zookeeper",
                nursery,
                request.getfixturevalue("zk_hosts"),
                request.getfixturevalue("zk_prefix"),
            )
        try:
            yield fleet
        finally:
            with trio.CancelScope(shield=True):
                await fleet.aclose()
            nursery.cancel_scope.cancel()


@pytest.fixture
def vhost() -> str:
    return f"public/t-{uuid.uuid4().hex[:8]}"


async def wait_lookup(
    store: PermissionStore, vhost: str, principal: str, expected: Permissions | None
) -> None:
    """Wait (on ``changed``, with a deadline) until the store's cache says ``expected``."""
    with trio.fail_after(DEADLINE):
        while store.lookup(vhost, principal) != expected:
            await store.changed(store.version)


async def test_a_write_is_visible_on_the_writing_replica_at_once(
    fleet: PermissionFleet, vhost: str
) -> None:
    store = await fleet.replica()
    assert store.lookup(vhost, "alice") is None
    version = store.version
    await store.set(vhost, "alice", "^a", "^b", "^c")
    assert store.lookup(vhost, "alice") == Permissions("^a", "^b", "^c")
    assert store.version > version
    assert await store.clear(vhost, "alice") is True
    assert store.lookup(vhost, "alice") is None


async def test_set_update_and_clear_reach_every_replica(fleet: PermissionFleet, vhost: str) -> None:
    a = await fleet.replica()
    b = await fleet.replica()
    await a.set(vhost, "alice", ".*", ".*", ".*")
    await wait_lookup(b, vhost, "alice", ALL)
    await a.set(vhost, "alice", "", "^out$", "^in$")
    await wait_lookup(b, vhost, "alice", Permissions("", "^out$", "^in$"))
    await b.set(vhost, "bob", "", "", "")
    await wait_lookup(a, vhost, "bob", NONE)
    assert await a.clear(vhost, "alice") is True
    await wait_lookup(b, vhost, "alice", None)
    assert b.lookup(vhost, "bob") == NONE


async def test_a_cacheless_writer_reaches_the_replicas(fleet: PermissionFleet, vhost: str) -> None:
    replica = await fleet.replica()
    writer = await fleet.writer()
    await writer.set(vhost, "carol", "^c$", "", "")
    await wait_lookup(replica, vhost, "carol", Permissions("^c$", "", ""))
    assert await writer.clear(vhost, "carol") is True
    await wait_lookup(replica, vhost, "carol", None)


async def test_clearing_what_is_not_there(fleet: PermissionFleet, vhost: str) -> None:
    store = await fleet.replica()
    assert await store.clear(vhost, "nobody") is False  # a vhost that never had any
    await store.set(vhost, "alice", ".*", ".*", ".*")
    assert await store.clear(vhost, "nobody") is False
    assert await store.clear(vhost, "alice") is True
    assert await store.clear(vhost, "alice") is False


async def test_list_one_vhost_or_all_sorted(fleet: PermissionFleet, vhost: str) -> None:
    store = await fleet.writer()
    other = vhost + "-2"
    await store.set(vhost, "zed", ".*", "", "")
    await store.set(vhost, "amy", "", ".*", "")
    await store.set(other, "bob", "", "", ".*")
    assert await store.list(vhost) == [
        PermissionEntry(vhost, "amy", Permissions("", ".*", "")),
        PermissionEntry(vhost, "zed", Permissions(".*", "", "")),
    ]
    assert await store.list(other) == [PermissionEntry(other, "bob", Permissions("", "", ".*"))]
    assert await store.list(vhost + "-none") == []
    everything = [entry for entry in await store.list() if entry.vhost in (vhost, other)]
    assert [(e.vhost, e.principal) for e in everything] == [
        (vhost, "amy"),
        (vhost, "zed"),
        (other, "bob"),
    ]
    await store.clear(vhost, "amy")
    assert [e.principal for e in await store.list(vhost)] == ["zed"]


ODD_PRINCIPALS = ["CN=client,O=Org", "a/b", "50%", ".", "..", "", "ünï cødé ✓", " lead"]


async def test_odd_names_round_trip(fleet: PermissionFleet, vhost: str) -> None:
    a = await fleet.replica()
    b = await fleet.replica()
    odd_vhost = vhost + "/a,b%/."
    for index, principal in enumerate(ODD_PRINCIPALS):
        await a.set(odd_vhost, principal, f"^{index}$", "ü.*", r"\d+")
    expected = {
        principal: Permissions(f"^{index}$", "ü.*", r"\d+")
        for index, principal in enumerate(ODD_PRINCIPALS)
    }
    for principal, permissions in expected.items():
        await wait_lookup(b, odd_vhost, principal, permissions)
    listed = await b.list(odd_vhost)
    assert {entry.principal: entry.permissions for entry in listed} == expected


async def test_a_bad_pattern_is_refused_and_nothing_is_stored(
    fleet: PermissionFleet, vhost: str
) -> None:
    store = await fleet.replica()
    await store.set(vhost, "alice", ".*", ".*", ".*")
    with pytest.raises(InvalidPermission, match="invalid read pattern '\\[a-'"):
        await store.set(vhost, "alice", "", "", "[a-")
    with pytest.raises(InvalidPermission, match="configure"):
        await store.set(vhost, "bob", "*", "", "")
    assert store.lookup(vhost, "alice") == ALL
    assert [e.principal for e in await store.list(vhost)] == ["alice"]


async def test_concurrent_writers_in_one_vhost_all_win(fleet: PermissionFleet, vhost: str) -> None:
    a = await fleet.replica()
    b = await fleet.replica()
    principals = [f"user-{index}" for index in range(12)]

    async def write(store: PermissionStore, names: list[str]) -> None:
        for name in names:
            await store.set(vhost, name, f"^{name}$", "", "")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, a, principals[::2])
        nursery.start_soon(write, b, principals[1::2])
    assert [e.principal for e in await a.list(vhost)] == sorted(principals)
    for store in (a, b):
        for name in principals:
            await wait_lookup(store, vhost, name, Permissions(f"^{name}$", "", ""))


async def test_a_late_replica_loads_what_is_there(fleet: PermissionFleet, vhost: str) -> None:
    writer = await fleet.writer()
    for index in range(5):
        await writer.set(vhost, f"u{index}", ".*", "", "")
        await writer.set(f"{vhost}-{index}", "u", "", ".*", "")
    late = await fleet.replica()
    # Loaded before run() reports started: no waiting.
    for index in range(5):
        assert late.lookup(vhost, f"u{index}") == Permissions(".*", "", "")
        assert late.lookup(f"{vhost}-{index}", "u") == Permissions("", ".*", "")


async def test_unchanged_entries_keep_their_memo(fleet: PermissionFleet, vhost: str) -> None:
    a = await fleet.replica()
    b = await fleet.replica()
    await a.set(vhost, "alice", "^q$", "", "")
    await wait_lookup(b, vhost, "alice", Permissions("^q$", "", ""))
    kept = b.lookup(vhost, "alice")
    await a.set(vhost, "bob", ".*", "", "")  # a change in the same vhost: it is re-read
    await wait_lookup(b, vhost, "bob", Permissions(".*", "", ""))
    assert b.lookup(vhost, "alice") is kept
    await a.set(vhost, "alice", "^q$", "", "")  # rewritten the same: still the same instance
    await a.set(vhost, "bob", "", "", "")
    await wait_lookup(b, vhost, "bob", NONE)
    assert b.lookup(vhost, "alice") is kept


async def test_changed_wakes_every_waiter(fleet: PermissionFleet, vhost: str) -> None:
    store = await fleet.replica()
    since = store.version
    woken: list[int] = []

    async def waiter() -> None:
        woken.append(await store.changed(since))

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert woken == []
            await store.set(vhost, "alice", ".*", ".*", ".*")
    assert len(woken) == 3 and all(version > since for version in woken)
