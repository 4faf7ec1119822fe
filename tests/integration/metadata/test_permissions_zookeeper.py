"""What only the ZooKeeper permission store has: its znodes, losing and regaining ZooKeeper
(through a TCP proxy that a test cuts; the shared stack is never touched), and znodes it did
not write."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import AsyncIterator

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.paths import encode_name
from gateway.metadata.permissions import Permissions, ZooKeeperPermissionStore
from gateway.metadata.store import MetadataUnavailable
from tests.integration.metadata.conftest import DEADLINE
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


@pytest.fixture
async def nursery() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as opened:
        yield opened
        opened.cancel_scope.cancel()


@pytest.fixture
async def stores() -> AsyncIterator[list[ZooKeeperPermissionStore]]:
    """Stores a test makes, closed after it (before its prefix is deleted)."""
    made: list[ZooKeeperPermissionStore] = []
    yield made
    with trio.CancelScope(shield=True):
        for store in made:
            await store.aclose()


@pytest.fixture
def vhost() -> str:
    return f"public/t-{uuid.uuid4().hex[:8]}"


async def _running(
    nursery: trio.Nursery,
    stores: list[ZooKeeperPermissionStore],
    hosts: str,
    prefix: str,
    **options: float,
) -> ZooKeeperPermissionStore:
    store = ZooKeeperPermissionStore(hosts, prefix=prefix, **options)
    stores.append(store)
    await nursery.start(store.run)
    return store


async def _wait(
    store: ZooKeeperPermissionStore, vhost: str, principal: str, expected: object
) -> None:
    with trio.fail_after(DEADLINE):
        while store.lookup(vhost, principal) != expected:
            await store.changed(store.version)


async def test_znode_layout(
    zk_hosts: str,
    zk_prefix: str,
    raw: KazooClient,
    stores: list[ZooKeeperPermissionStore],
    vhost: str,
) -> None:
    store = ZooKeeperPermissionStore(zk_hosts, prefix=zk_prefix)
    stores.append(store)
    await store.set(vhost, "CN=a,O=b", "^c$", "^w$", "^r$")
    folder = f"{zk_prefix}/permissions/{vhost.replace('/', '%2F')}"
    assert raw.get_children(folder) == ["CN=a%2CO=b"]
    data, _ = raw.get(f"{folder}/CN=a%2CO=b")
    assert json.loads(data) == {"v": 1, "configure": "^c$", "write": "^w$", "read": "^r$"}
    # Every write bumps the vhost node: that is what replicas watch, and what writers CAS on.
    _, before = raw.get(folder)
    await store.set(vhost, "other", "", "", "")
    await store.clear(vhost, "other")
    _, after = raw.get(folder)
    assert after.version == before.version + 2


async def test_outage_keeps_the_cache_refuses_writes_and_catches_up(
    zk_hosts: str,
    zk_prefix: str,
    proxy: TcpProxy,
    nursery: trio.Nursery,
    stores: list[ZooKeeperPermissionStore],
    vhost: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = await _running(nursery, stores, proxy.address, zk_prefix)
    b = await _running(nursery, stores, zk_hosts, zk_prefix)
    await b.set(vhost, "kept", ".*", "", "")
    await b.set(vhost, "doomed", ".*", "", "")
    await _wait(a, vhost, "doomed", Permissions(".*", "", ""))

    proxy.cut()
    with trio.fail_after(DEADLINE):
        await a.wait_connected(False)
    with pytest.raises(MetadataUnavailable, match="unreachable"):
        await a.set(vhost, "during", ".*", "", "")
    assert a.lookup(vhost, "doomed") == Permissions(".*", "", "")  # checks go on from the cache

    await b.clear(vhost, "doomed")
    await b.set(vhost, "kept", "^changed$", "", "")
    await b.set(vhost + "-new", "fresh", "", "", ".*")  # a vhost a has never seen

    with caplog.at_level(logging.INFO, logger="gateway.metadata.permissions"):
        proxy.restore()
        await _wait(a, vhost, "doomed", None)
        await _wait(a, vhost, "kept", Permissions("^changed$", "", ""))
        await _wait(a, vhost + "-new", "fresh", Permissions("", "", ".*"))
    assert any("reconnected" in record.getMessage() for record in caplog.records)
    # Writes work again, and the watches are back.
    await a.set(vhost, "after", "", "", "")
    await b.set(vhost, "after-b", "", "", "")
    await _wait(a, vhost, "after-b", Permissions("", "", ""))


async def test_session_expiry_reloads_with_a_new_session(
    zk_hosts: str,
    zk_prefix: str,
    proxy: TcpProxy,
    raw: KazooClient,
    nursery: trio.Nursery,
    stores: list[ZooKeeperPermissionStore],
    vhost: str,
) -> None:
    a = await _running(nursery, stores, proxy.address, zk_prefix, session_timeout=4)
    b = await _running(nursery, stores, zk_hosts, zk_prefix)
    await a.set(vhost, "alice", ".*", ".*", ".*")
    # An ephemeral znode of a's session tells when the server has expired that session.
    marker = f"{zk_prefix}/session-marker"
    await trio.to_thread.run_sync(
        # A peek at the private client: only a session of its own can own the marker.
        lambda: a._client.create(marker, ephemeral=True)
    )
    expired = threading.Event()
    if raw.exists(marker, watch=lambda event: expired.set()) is None:
        expired.set()

    proxy.cut()
    await b.clear(vhost, "alice")
    await b.set(vhost, "bob", "", "", "")
    assert await trio.to_thread.run_sync(expired.wait, 60), "the session never expired"
    assert a.lookup(vhost, "alice") is not None  # still the cached entry

    proxy.restore()
    await _wait(a, vhost, "alice", None)
    await _wait(a, vhost, "bob", Permissions("", "", ""))
    await b.set(vhost, "carol", "", "", "")  # watched again, on the new session
    await _wait(a, vhost, "carol", Permissions("", "", ""))


async def test_unreachable(proxy: TcpProxy, zk_prefix: str) -> None:
    proxy.cut()
    store = ZooKeeperPermissionStore(proxy.address, prefix=zk_prefix, connect_timeout=1)
    try:
        with pytest.raises(MetadataUnavailable, match="cannot connect to ZooKeeper"):
            await store.list()
        with pytest.raises(MetadataUnavailable, match="cannot connect"):
            await store.run()  # fails before it would report started
    finally:
        await store.aclose()


async def test_nodes_it_did_not_write(
    zk_hosts: str,
    zk_prefix: str,
    raw: KazooClient,
    nursery: trio.Nursery,
    stores: list[ZooKeeperPermissionStore],
    vhost: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    folder = f"{zk_prefix}/permissions/{encode_name(vhost)}"
    raw.create(f"{folder}/good", b'{"v":1,"configure":".*","write":"","read":""}', makepath=True)
    raw.create(f"{folder}/garbage", b"not json")
    raw.create(f"{folder}/badregex", b'{"v":1,"configure":"(","write":"","read":""}')
    raw.create(f"{zk_prefix}/permissions/%ZZ")  # not a name encode_name makes
    with caplog.at_level(logging.WARNING, logger="gateway.metadata.permissions"):
        store = await _running(nursery, stores, zk_hosts, zk_prefix)
    assert store.lookup(vhost, "good") == Permissions(".*", "", "")
    assert store.lookup(vhost, "garbage") is None and store.lookup(vhost, "badregex") is None
    messages = " ".join(record.getMessage() for record in caplog.records)
    assert "garbage" in messages and "badregex" in messages and "%ZZ" in messages

    # A vhost node deleted by hand takes its entries with it.
    raw.delete(folder, recursive=True)
    await _wait(store, vhost, "good", None)
