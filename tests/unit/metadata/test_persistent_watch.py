"""persistent_watch.py on the real ZooKeeper: addWatch, and one event per node created,
changed or deleted anywhere below the root, in order, through kazoo's connection thread;
one-shot watches on the same paths keep working."""

from __future__ import annotations

import threading

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.persistent_watch import (
    CREATED,
    DATA_CHANGED,
    DELETED,
    AddWatch,
)

pytestmark = pytest.mark.integration

DEADLINE = 20.0


def test_add_watch_is_the_request_zookeeper_expects() -> None:
    request = AddWatch("/a")
    # path (int length + bytes), mode PERSISTENT_RECURSIVE (1)
    assert bytes(request.serialize()) == b"\x00\x00\x00\x02/a\x00\x00\x00\x01"
    assert request.type == 106


async def test_events_below_the_root_arrive_in_order(
    zk_hosts: str, zk_prefix: str, raw: KazooClient
) -> None:
    session = KazooSession(
        zk_hosts, owner="test", session_timeout=10, connect_timeout=10, request_timeout=10
    )
    await session.connect()
    root = f"{zk_prefix}/tree"
    raw.ensure_path(root)
    seen: list[tuple[int, str]] = []
    changed = threading.Event()
    one_shot: list[str] = []

    def on_event(event_type: int, path: str) -> None:
        seen.append((event_type, path))
        changed.set()

    try:
        await trio.to_thread.run_sync(session.watch_tree(root, on_event).get, True, DEADLINE)
        # A one-shot watch on a path below the root still fires (one event, both watchers).
        await trio.to_thread.run_sync(
            lambda: session.client.exists(f"{root}/a", watch=lambda e: one_shot.append(e.type))
        )
        raw.create(f"{root}/a", b"1")
        raw.create(f"{root}/a/b", b"")
        raw.set(f"{root}/a", b"2")
        raw.delete(f"{root}/a/b")
        raw.create(f"{zk_prefix}/outside", b"")
        expected = [
            (CREATED, f"{root}/a"),
            (CREATED, f"{root}/a/b"),
            (DATA_CHANGED, f"{root}/a"),
            (DELETED, f"{root}/a/b"),
        ]
        with trio.fail_after(DEADLINE):
            while len(seen) < len(expected) or not one_shot:
                await trio.to_thread.run_sync(changed.wait, 1.0)
                changed.clear()
        assert seen == expected
        assert one_shot == ["CREATED"]
        session.unwatch_tree(root)
        raw.create(f"{root}/c", b"")
        # Ordering: a request answered after the create comes after its event would have.
        await trio.to_thread.run_sync(session.client.exists, f"{root}/c")
        assert seen == expected
    finally:
        await session.aclose()
