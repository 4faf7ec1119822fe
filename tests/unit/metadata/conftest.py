"""Fixtures for the unit tests of the ZooKeeper parts (kazoo_session.py, zookeeper/*): the
real ZooKeeper of the local stack, under a prefix of the test's own (deleted afterwards), and
the parts of one store assembled by hand so that each can be driven on its own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.paths import Layout
from gateway.metadata.zookeeper.calls import KazooCalls
from gateway.metadata.zookeeper.reclaim import EphemeralRecords
from gateway.metadata.zookeeper.transactions import EntityTransactions
from gateway.metadata.zookeeper.watcher import NamespaceWatcher
from tests.conftest import StackEndpoints
from tests.support.tcp_proxy import TcpProxy
from tests.support.zookeeper import delete_tree, kazoo_client, unique_prefix


@pytest.fixture
def zk_hosts(pulsar_stack: StackEndpoints) -> str:
    return pulsar_stack.zookeeper


@pytest.fixture
def zk_prefix(zk_hosts: str) -> Iterator[str]:
    prefix = unique_prefix()
    yield prefix
    delete_tree(zk_hosts, prefix)


@pytest.fixture
def raw(zk_hosts: str) -> Iterator[KazooClient]:
    """A plain kazoo client, to look at (or tamper with) the znodes directly."""
    with kazoo_client(zk_hosts) as client:
        yield client


@pytest.fixture
def namespace() -> str:
    return f"public/t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def proxy(zk_hosts: str) -> AsyncIterator[TcpProxy]:
    """A TCP proxy in front of ZooKeeper whose connections a test can cut."""
    host, port = zk_hosts.rsplit(":", 1)
    tcp_proxy = TcpProxy(host, int(port))
    async with trio.open_nursery() as nursery:
        await nursery.start(tcp_proxy.run)
        yield tcp_proxy
        nursery.cancel_scope.cancel()


@dataclass
class Parts:
    """One store's parts, wired as ZooKeeperMetadataStore wires them."""

    session: KazooSession
    layout: Layout
    calls: KazooCalls
    watcher: NamespaceWatcher
    ephemerals: EphemeralRecords
    transactions: EntityTransactions


def make_parts(hosts: str, prefix: str, lags: list[float] | None = None) -> Parts:
    session = KazooSession(
        hosts,
        owner="metadata store",
        session_timeout=10,
        connect_timeout=10,
        request_timeout=10,
    )
    layout = Layout(prefix)
    calls = KazooCalls(session, layout)
    watcher = NamespaceWatcher(session, layout, None if lags is None else lags.append)
    ephemerals = EphemeralRecords(calls, watcher)
    transactions = EntityTransactions(calls, watcher, ephemerals, "replica-1")
    return Parts(session, layout, calls, watcher, ephemerals, transactions)


@pytest.fixture
async def parts(zk_hosts: str, zk_prefix: str) -> AsyncIterator[Parts]:
    """Connected parts whose namespace skeletons are created on demand."""
    built = make_parts(zk_hosts, zk_prefix)
    await built.session.connect()
    try:
        yield built
    finally:
        with trio.CancelScope(shield=True):
            await built.session.aclose()
