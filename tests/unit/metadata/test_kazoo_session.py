"""KazooSession, the kazoo<->trio bridge of both ZooKeeper stores, on the real ZooKeeper: its
lifecycle, callbacks handed from kazoo's threads to trio in order, and the state changes it
reports (through a proxy whose connections the test cuts)."""

from __future__ import annotations

import socket
import threading

import pytest
import trio
from kazoo.exceptions import NoNodeError

from gateway.metadata.kazoo_session import KazooSession, chroot_ancestors
from gateway.metadata.store import MetadataUnavailable
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

DEADLINE = 20.0


def _session(hosts: str, **callbacks: object) -> KazooSession:
    return KazooSession(
        hosts,
        owner="test store",
        session_timeout=10,
        connect_timeout=10,
        request_timeout=5,
        **callbacks,  # type: ignore[arg-type]
    )


async def test_connect_and_close(zk_hosts: str) -> None:
    closing: list[bool] = []
    session = _session(zk_hosts)
    session._on_closing = lambda: closing.append(session.closed)
    assert not session.connected
    await session.connect()
    await session.connect()  # a second connect is a no-op
    assert session.connected
    with trio.fail_after(DEADLINE):
        await session.wait_connected(True)
    session.check_connected("do something")  # no refusal while connected

    await session.aclose()
    assert closing == [True]  # told while already closed, before the disconnect
    assert not session.connected
    with pytest.raises(MetadataUnavailable, match="cannot do it: the test store is closed"):
        session.check_connected("do it")
    with trio.fail_after(DEADLINE):
        await session.wait_connected(False)

    never_started = _session(zk_hosts)
    await never_started.aclose()
    with pytest.raises(MetadataUnavailable, match="the test store is closed"):
        await never_started.connect()


async def test_an_unreachable_zookeeper_is_refused_within_the_connect_timeout() -> None:
    # A port bound but not listening: every connection attempt is refused.
    reserved = socket.socket()
    reserved.bind(("127.0.0.1", 0))
    port = reserved.getsockname()[1]
    session = KazooSession(
        f"127.0.0.1:{port}",
        owner="test store",
        session_timeout=10,
        connect_timeout=1,
        request_timeout=1,
    )
    with pytest.raises(MetadataUnavailable, match=r"cannot connect to ZooKeeper at .* within 1 s"):
        await session.connect()
    assert not session.started
    with pytest.raises(MetadataUnavailable, match="unreachable"):
        session.check_connected("write", "; writes are refused")
    await session.aclose()
    reserved.close()


async def test_answers_reach_trio_in_the_order_the_requests_were_issued(
    zk_hosts: str, zk_prefix: str
) -> None:
    session = _session(zk_hosts)
    await session.connect()
    try:
        trio_thread = threading.get_ident()
        seen: list[tuple[int, int]] = []
        done = trio.Event()
        for index in range(50):

            def apply(result: object, index: int = index) -> None:
                seen.append((index, threading.get_ident()))
                if len(seen) == 50:
                    done.set()

            session.link(session.client.exists_async(f"{zk_prefix}/n{index}"), apply)
        with trio.fail_after(DEADLINE):
            await done.wait()
        assert [index for index, _ in seen] == list(range(50))
        assert {thread for _, thread in seen} == {trio_thread}
    finally:
        await session.aclose()


async def test_a_failing_callback_is_logged_not_raised(
    zk_hosts: str, zk_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    session = _session(zk_hosts)
    await session.connect()
    try:
        after = trio.Event()

        def broken(result: object) -> None:
            raise RuntimeError("boom")

        session.link(session.client.exists_async(zk_prefix), broken)
        session.link(session.client.exists_async(zk_prefix), lambda result: after.set())
        with trio.fail_after(DEADLINE):
            await after.wait()  # the trio run survived the first callback
        assert any("applying a ZooKeeper answer failed" in r.getMessage() for r in caplog.records)
    finally:
        await session.aclose()


async def test_notify_runs_on_the_trio_thread(zk_hosts: str) -> None:
    session = _session(zk_hosts)
    session.notify(lambda: None)  # before connect: nowhere to go, dropped
    await session.connect()
    try:
        ran_on: list[int] = []
        done = trio.Event()

        def note() -> None:
            ran_on.append(threading.get_ident())
            done.set()

        await trio.to_thread.run_sync(session.notify, note)
        with trio.fail_after(DEADLINE):
            await done.wait()
        assert ran_on == [threading.get_ident()]
    finally:
        await session.aclose()


async def test_notify_hands_over_every_call_in_order(zk_hosts: str) -> None:
    """Calls from several threads at once, handed over in batches: every one runs, each
    thread's in the order it made them; a call made while a batch runs waits for the next."""
    session = _session(zk_hosts)
    await session.connect()
    try:
        threads, calls = 4, 2000
        ran: dict[int, list[int]] = {thread: [] for thread in range(threads)}
        done = trio.Event()
        remaining = [threads * calls]

        def note(thread: int, index: int) -> None:
            ran[thread].append(index)
            remaining[0] -= 1
            if not remaining[0]:
                done.set()

        def call_many(thread: int) -> None:
            for index in range(calls):
                session.notify(note, thread, index)

        async with trio.open_nursery() as nursery:
            for thread in range(threads):
                nursery.start_soon(trio.to_thread.run_sync, call_many, thread)
        with trio.fail_after(DEADLINE):
            await done.wait()
        assert ran == {thread: list(range(calls)) for thread in range(threads)}

        order: list[str] = []
        later = trio.Event()

        def first() -> None:
            session.notify(second)
            order.append("first")

        def second() -> None:
            order.append("second")
            later.set()

        session.notify(first)
        with trio.fail_after(DEADLINE):
            await later.wait()
        assert order == ["first", "second"]
    finally:
        await session.aclose()


async def test_call_in_thread_turns_kazoo_errors_into_unavailable(
    zk_hosts: str, zk_prefix: str
) -> None:
    session = _session(zk_hosts)
    await session.connect()
    try:
        assert await session.call_in_thread(session.client.exists, "look", zk_prefix) is None
        with pytest.raises(MetadataUnavailable, match="ZooKeeper refused to read it: NoNodeError"):
            await session.call_in_thread(session.client.get, "read it", f"{zk_prefix}/none")
        # The cause stays attached, for logs.
        try:
            await session.call_in_thread(session.client.get, "read it", f"{zk_prefix}/none")
        except MetadataUnavailable as error:
            assert isinstance(error.__cause__, NoNodeError)
    finally:
        await session.aclose()


async def test_state_changes_are_reported_in_order(proxy: TcpProxy) -> None:
    disconnects: list[tuple[str, bool]] = []
    reconnects: list[bool] = []
    changed = trio.Event()

    def on_disconnected(state: str, was_connected: bool) -> None:
        disconnects.append((state, was_connected))
        changed.set()

    def on_reconnected(new_session: bool) -> None:
        reconnects.append(new_session)
        changed.set()

    session = _session(
        proxy.address, on_disconnected=on_disconnected, on_reconnected=on_reconnected
    )
    await session.connect()
    try:
        proxy.cut()
        with trio.fail_after(DEADLINE):
            await session.wait_connected(False)
        assert session.disconnected
        assert disconnects[0] == ("SUSPENDED", True)
        with pytest.raises(MetadataUnavailable, match="unreachable"):
            session.check_connected("write")

        proxy.restore()
        with trio.fail_after(DEADLINE):
            await session.wait_connected(True)
        # Back within the session timeout: the same session, ephemeral znodes kept.
        assert reconnects == [False]
        assert not session.session_lost
    finally:
        await session.aclose()


def test_a_chroot_is_created_parents_first() -> None:
    assert chroot_ancestors("/a") == ["/a"]
    assert chroot_ancestors("/teams/a/fleet") == ["/teams", "/teams/a", "/teams/a/fleet"]
