"""Fixtures for the metadata store tests: the same tests run on the memory store and on the
ZooKeeper store (the latter marked ``integration``, under a prefix of its own per test that is
deleted afterwards), and a ``Fleet`` that hands out "replicas" of the store under test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Protocol

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import MetadataStore, VhostView
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from tests.conftest import StackEndpoints
from tests.support.tcp_proxy import TcpProxy
from tests.support.zookeeper import delete_tree, kazoo_client, unique_prefix

DEADLINE = 10.0  # seconds for anything to propagate between replicas


class Fleet(Protocol):
    kind: str

    async def replica(self) -> MetadataStore: ...


class MemoryFleet:
    """Every replica is a session of its own on one shared memory state (how the memory
    store models a fleet): they see the same views, and closing one ends its session."""

    kind = "memory"

    def __init__(self) -> None:
        self.store = MemoryMetadataStore()
        self.stores: list[MemoryMetadataStore] = []

    async def replica(self) -> MetadataStore:
        store = self.store.replica() if self.stores else self.store
        self.stores.append(store)
        return store

    async def aclose(self) -> None:
        for store in [self.store, *self.stores]:
            await store.aclose()


class ZooKeeperFleet:
    """Every replica is a store of its own (its own ZooKeeper session) under one prefix."""

    kind = "zookeeper"

    def __init__(self, hosts: str, prefix: str) -> None:
        self.hosts = hosts
        self.prefix = prefix
        self.stores: list[ZooKeeperMetadataStore] = []

    async def replica(self, hosts: str | None = None, **options: float) -> ZooKeeperMetadataStore:
        store = ZooKeeperMetadataStore(hosts or self.hosts, prefix=self.prefix, **options)
        self.stores.append(store)
        await store.connect()
        return store

    async def aclose(self) -> None:
        for store in self.stores:
            await store.aclose()


@pytest.fixture
def zk_prefix(pulsar_stack: StackEndpoints) -> Iterator[str]:
    """A prefix of the test's own, deleted (with everything under it) afterwards."""
    prefix = unique_prefix()
    yield prefix
    delete_tree(pulsar_stack.zookeeper, prefix)


@pytest.fixture
def zk_hosts(pulsar_stack: StackEndpoints) -> str:
    return pulsar_stack.zookeeper


@pytest.fixture
async def zk_fleet(zk_hosts: str, zk_prefix: str) -> AsyncIterator[ZooKeeperFleet]:
    fleet = ZooKeeperFleet(zk_hosts, zk_prefix)
    try:
        yield fleet
    finally:
        with trio.CancelScope(shield=True):
            await fleet.aclose()


@pytest.fixture(params=["memory", pytest.param("zookeeper", marks=pytest.mark.integration)])
def fleet_spec(request: pytest.FixtureRequest) -> MemoryFleet | ZooKeeperFleet:
    if request.param == "memory":
        return MemoryFleet()
    # Only the ZooKeeper variant needs the stack (and a prefix to clean up).
    return ZooKeeperFleet(request.getfixturevalue("zk_hosts"), request.getfixturevalue("zk_prefix"))


@pytest.fixture
async def fleet(fleet_spec: MemoryFleet | ZooKeeperFleet) -> AsyncIterator[Fleet]:
    """Replicas of the store under test, closed after the test (before its prefix goes)."""
    try:
        yield fleet_spec
    finally:
        with trio.CancelScope(shield=True):
            await fleet_spec.aclose()


@pytest.fixture
def namespace() -> str:
    return f"public/t-{uuid.uuid4().hex[:8]}"


async def opened(fleet: Fleet, namespace: str) -> MetadataStore:
    """A new replica of ``fleet`` with ``namespace`` open."""
    store = await fleet.replica()
    await store.open(namespace)
    return store


async def wait_for(
    store: MetadataStore,
    namespace: str,
    predicate: Callable[[VhostView], bool],
    timeout: float = DEADLINE,
) -> VhostView:
    """The first view of ``store`` that satisfies ``predicate``, waiting on ``changed``."""
    with trio.fail_after(timeout):
        view = store.view(namespace)
        while not predicate(view):
            view = await store.changed(namespace, view.version)
        return view


@pytest.fixture
def raw(zk_hosts: str) -> Iterator[KazooClient]:
    """A plain kazoo client, to look at (or tamper with) the znodes directly."""
    with kazoo_client(zk_hosts) as client:
        yield client


@pytest.fixture
async def proxy(zk_hosts: str) -> AsyncIterator[TcpProxy]:
    host, port = zk_hosts.rsplit(":", 1)
    tcp_proxy = TcpProxy(host, int(port))
    async with trio.open_nursery() as nursery:
        await nursery.start(tcp_proxy.run)
        yield tcp_proxy
        nursery.cancel_scope.cancel()
