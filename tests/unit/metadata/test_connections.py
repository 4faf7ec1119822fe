"""gateway/metadata/connections.py on the stack's ZooKeeper: two replicas' directories, each
writing its own connection and consumer records, listing the other's, and closing the other's
connection through a close request; and how consumers are paged and writes batched."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata import connections
from gateway.metadata.connections import (
    ConnectionDirectory,
    ConsumerGroup,
    _batches,
    _changes,
    consumer_pages,
)


class Replica:
    """What a replica gives its directory: its connections, and what closing one does."""

    def __init__(self) -> None:
        self.connections: dict[str, Mapping[str, Any]] = {}
        self.consumers: dict[str, ConsumerGroup] = {}
        self.closed: list[tuple[str, str]] = []

    def records(self) -> dict[str, Mapping[str, Any]]:
        return dict(self.connections)

    def consumer_groups(self) -> dict[str, ConsumerGroup]:
        return dict(self.consumers)

    async def close(self, connection: str, reason: str) -> bool:
        self.closed.append((connection, reason))
        return self.connections.pop(connection, None) is not None


async def wait_until(check: Any, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not await check():
            await trio.sleep(0.05)  # polling ZooKeeper, bounded by fail_after


async def test_replicas_list_each_other_and_close_across(
    zk_hosts: str, zk_prefix: str, raw: KazooClient
) -> None:
    one, two = Replica(), Replica()
    first = ConnectionDirectory(zk_hosts, "replica-1", prefix=zk_prefix, session_timeout=10)
    second = ConnectionDirectory(zk_hosts, "replica/2", prefix=zk_prefix, session_timeout=10)
    one.connections["c,1"] = {"name": "127.0.0.1:1 -> 127.0.0.1:5672", "user": "u"}
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(first.run, one.records, one.close, {"name": "n1"}, interval=0.1)
        )
        await nursery.start(
            partial(second.run, two.records, two.close, {"name": "n2"}, interval=0.1)
        )

        async def listed() -> bool:
            return [c.info for c in await second.connections()] == [one.connections["c,1"]]

        await wait_until(listed)
        found = await second.connections()
        assert (found[0].replica, found[0].connection) == ("replica-1", "c,1")
        assert sorted(r.info["name"] for r in await first.replicas()) == ["n1", "n2"]

        assert await second.request_close("replica-1", "c,1", "maintenance", "admin") is True
        assert one.closed == [("c,1", "maintenance")]

        async def gone() -> bool:
            return await second.connections() == []

        await wait_until(gone)
        # Asking a replica that does not exist is answered at once.
        assert await second.request_close("replica-9", "c,1", "why", "admin") is False
        nursery.cancel_scope.cancel()
    # Stopping took each replica's records and folders away.
    assert raw.get_children(f"{zk_prefix}/replicas") == []
    assert raw.get_children(f"{zk_prefix}/connections") == []
    await first.aclose()
    await second.aclose()


async def test_a_starting_replicas_folder_is_not_taken_for_a_dead_ones(
    zk_hosts: str, zk_prefix: str
) -> None:
    """A listing removes folders of replicas that have no node: a replica writes its node
    before its folders, so one listing while it starts cannot remove them under it."""
    replica = Replica()
    directory = ConnectionDirectory(zk_hosts, "starting", prefix=zk_prefix, session_timeout=10)
    lister = ConnectionDirectory(zk_hosts, "lister", prefix=zk_prefix, session_timeout=10)
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(directory.run, replica.records, replica.close, {}, interval=0.1)
        )
        assert await lister.connections() == []  # the empty folder stays
        replica.connections["c1"] = {"name": "a -> b"}

        async def listed() -> bool:
            return len(await lister.connections()) == 1

        await wait_until(listed)
        nursery.cancel_scope.cancel()
    await directory.aclose()
    await lister.aclose()


def test_a_connections_consumers_are_paged_below_the_page_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    about = {"name": "a -> b", "user": "u"}
    assert consumer_pages("c1", ConsumerGroup(about, [])) == {}
    small = consumer_pages("c1", ConsumerGroup(about, [{"consumer_tag": "t"}]))
    assert list(small) == ["c1#0"]
    assert json.loads(small["c1#0"]) == {
        "v": 1,
        "connection": about,
        "consumers": [{"consumer_tag": "t"}],
    }
    monkeypatch.setattr(connections, "PAGE_BYTES", 100)
    many = [{"consumer_tag": f"tag-{index:03}", "queue": "q"} for index in range(20)]
    pages = consumer_pages("a#b", ConsumerGroup(about, many))
    assert list(pages) == [f"a#b#{index}" for index in range(len(pages))]
    assert len(pages) > 1
    listed = [c for data in pages.values() for c in json.loads(data)["consumers"]]
    assert listed == many  # every consumer once, in order
    for data in pages.values():
        consumers = json.loads(data)["consumers"]
        assert len(json.dumps(consumers, separators=(",", ":"))) <= 100 + 2
    # One consumer larger than a page still gets a page of its own.
    huge = [{"arguments": {"x": "y" * 500}}, {"consumer_tag": "t"}]
    assert len(consumer_pages("c", ConsumerGroup(about, huge))) == 2


def test_writes_are_batched_by_count_and_size(monkeypatch: pytest.MonkeyPatch) -> None:
    written: dict[str, bytes] = {"gone": b"x", "same": b"s", "changed": b"1"}
    wanted = {"same": b"s", "changed": b"2", "new": b"n"}
    ops = _changes("/f", written, wanted)
    assert sorted((op.kind, op.path) for op in ops) == [
        ("create", "/f/new"),
        ("delete", "/f/gone"),
        ("set", "/f/changed"),
    ]
    monkeypatch.setattr(connections, "BATCH", 2)
    assert [len(batch) for batch in _batches(ops)] == [2, 1]
    monkeypatch.setattr(connections, "BATCH_BYTES", 1)
    # One byte of records each (a delete carries none): the second starts a transaction.
    assert [[op.kind for op in batch] for batch in _batches(ops)] == [
        [ops[0].kind],
        [ops[1].kind, ops[2].kind],
    ]
    assert ops[2].kind == "delete"


async def test_consumers_are_listed_by_other_replicas_and_go_with_their_connection(
    zk_hosts: str, zk_prefix: str, raw: KazooClient
) -> None:
    one = Replica()
    first = ConnectionDirectory(zk_hosts, "replica-1", prefix=zk_prefix, session_timeout=10)
    second = ConnectionDirectory(zk_hosts, "replica-2", prefix=zk_prefix, session_timeout=10)
    about = {"name": "127.0.0.1:1 -> 127.0.0.1:5672", "user": "u", "vhost": "/"}
    one.connections["c1"] = about
    one.consumers["c1"] = ConsumerGroup(about, [{"consumer_tag": "a", "queue": "q"}])
    async with trio.open_nursery() as nursery:
        await nursery.start(
            partial(
                first.run,
                one.records,
                one.close,
                {"name": "n1"},
                consumers=one.consumer_groups,
                interval=0.1,
            )
        )

        async def listed(tags: list[str]) -> bool:
            found = await second.consumers()
            return [c["consumer_tag"] for entry in found for c in entry.consumers] == tags

        await wait_until(partial(listed, ["a"]))
        (entry,) = await second.consumers()
        assert (entry.replica, entry.connection, entry.about) == ("replica-1", "c1", about)
        # A consumer more, then none: the record is replaced, then removed.
        one.consumers["c1"] = ConsumerGroup(
            about, [{"consumer_tag": "a", "queue": "q"}, {"consumer_tag": "b", "queue": "q"}]
        )
        await wait_until(partial(listed, ["a", "b"]))
        del one.consumers["c1"]
        await wait_until(partial(listed, []))
        assert raw.get_children(f"{zk_prefix}/connection-consumers/replica-1") == []
        assert [c.connection for c in await second.connections()] == ["c1"]
        one.consumers["c1"] = ConsumerGroup(about, [{"consumer_tag": "c", "queue": "q"}])
        await wait_until(partial(listed, ["c"]))
        nursery.cancel_scope.cancel()
    # Stopping took the records and the folder away.
    assert raw.get_children(f"{zk_prefix}/connection-consumers") == []
    assert await second.consumers() == []
    await first.aclose()
    await second.aclose()
