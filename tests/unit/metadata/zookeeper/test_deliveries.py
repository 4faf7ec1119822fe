"""deliveries.py on the real ZooKeeper: a follower sees records written while its connection
was cut and after its session expired (new watches), works in a namespace without the folder
(written by an older version), and ignores names no replica writes."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.paths import Layout
from gateway.metadata.zookeeper.calls import KazooCalls
from gateway.metadata.zookeeper.deliveries import DeliveryRecords
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

DEADLINE = 30.0


class Seen:
    def __init__(self) -> None:
        self.records: dict[str, bytes] | None = None
        self.changed = trio.Event()

    def update(self, records: Mapping[str, bytes]) -> None:
        self.records = dict(records)
        self.changed.set()
        self.changed = trio.Event()

    async def until(self, expected: dict[str, bytes], timeout: float = DEADLINE) -> None:
        with trio.fail_after(timeout):
            while self.records != expected:
                await self.changed.wait()


def records_of(session: KazooSession, prefix: str, replica: str) -> DeliveryRecords:
    return DeliveryRecords(session, KazooCalls(session, Layout(prefix)), replica)


def session_on(hosts: str, timeout: float = 10) -> KazooSession:
    return KazooSession(
        hosts,
        owner="metadata store",
        session_timeout=timeout,
        connect_timeout=10,
        request_timeout=10,
    )


async def test_a_follower_catches_up_after_a_cut_and_an_expired_session(
    zk_hosts: str, zk_prefix: str, proxy: TcpProxy, raw: KazooClient, namespace: str
) -> None:
    follower_session = session_on(proxy.address, timeout=4)
    writer_session = session_on(zk_hosts)
    await follower_session.connect()
    await writer_session.connect()
    follower = records_of(follower_session, zk_prefix, "follower")
    writer = records_of(writer_session, zk_prefix, "writer")
    # A namespace written by a version without delivery records: no folder for them.
    raw.ensure_path(Layout(zk_prefix).namespace(namespace))
    seen = Seen()
    try:
        async with trio.open_nursery() as nursery:
            # The folder does not exist yet: the follower watches for it.
            nursery.start_soon(follower.follow, namespace, seen.update)
            await seen.until({})
            await writer.write(namespace, b"one")  # creates the folder
            await seen.until({"writer": b"one"})
            await follower.write(namespace, b"its own")  # never reported to itself

            # Cut: the session survives (4 s timeout) if the cut is short.
            proxy.cut()
            await writer.write(namespace, b"two")
            proxy.restore()
            await seen.until({"writer": b"two"})

            # Cut until the session expires: its watches are gone; the follower reads again.
            marker = f"{zk_prefix}/marker"
            await trio.to_thread.run_sync(
                lambda: follower_session.client.create(marker, ephemeral=True)
            )
            expired = threading.Event()
            if raw.exists(marker, watch=lambda event: expired.set()) is None:
                expired.set()
            proxy.cut()
            await writer.write(namespace, b"three")
            another = records_of(writer_session, zk_prefix, "another")
            await another.write(namespace, b"x")
            assert await trio.to_thread.run_sync(expired.wait, 60), "the session never expired"
            proxy.restore()
            await seen.until({"writer": b"three", "another": b"x"})

            # Names no replica writes are ignored; records that go are reported gone.
            raw.create(f"{Layout(zk_prefix).deliveries(namespace)}/%ZZ", b"stray")
            await writer.write(namespace, None)
            await seen.until({"another": b"x"})
            nursery.cancel_scope.cancel()
        # A deleted namespace is not created again by a record.
        raw.delete(Layout(zk_prefix).namespace(namespace), recursive=True)
        await writer.write(namespace, b"late")
        assert raw.exists(Layout(zk_prefix).namespace(namespace)) is None
    finally:
        with trio.CancelScope(shield=True):
            await follower_session.aclose()
            await writer_session.aclose()
