"""gateway/metadata/connections.py on the stack's ZooKeeper: two replicas' directories, each
writing its own connection records, listing the other's, and closing the other's connection
through a close request."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import trio
from kazoo.client import KazooClient

from gateway.metadata.connections import ConnectionDirectory


class Replica:
    """What a replica gives its directory: its connections, and what closing one does."""

    def __init__(self) -> None:
        self.connections: dict[str, Mapping[str, Any]] = {}
        self.closed: list[tuple[str, str]] = []

    def records(self) -> dict[str, Mapping[str, Any]]:
        return dict(self.connections)

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
