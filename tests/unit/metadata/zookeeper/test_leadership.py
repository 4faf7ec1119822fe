"""leadership.py on the real ZooKeeper: the first candidate leads, the next takes over when it
stands down, who leads is readable, and a deleted namespace has no election. (Leaders losing
ZooKeeper: tests/integration/metadata/test_zookeeper.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.zookeeper.leadership import Leadership
from tests.unit.metadata.conftest import Parts, make_parts

pytestmark = pytest.mark.integration

DEADLINE = 20.0


@pytest.fixture
async def other(zk_hosts: str, zk_prefix: str) -> AsyncIterator[Parts]:
    """A second replica (a session of its own)."""
    built = make_parts(zk_hosts, zk_prefix)
    await built.session.connect()
    try:
        yield built
    finally:
        with trio.CancelScope(shield=True):
            await built.session.aclose()


async def test_the_first_candidate_leads_and_the_next_takes_over(
    parts: Parts, other: Parts, namespace: str, raw: KazooClient
) -> None:
    await parts.calls.ensure_paths(namespace, parts.layout.skeleton(namespace), "open")
    first = Leadership(parts.session, parts.calls, "r1")
    second = Leadership(other.session, other.calls, "r2")
    assert await first.leader_of(namespace) is None
    leading: list[str] = []
    changed = trio.Event()

    def task(name: str) -> Callable[[], Awaitable[None]]:
        async def lead() -> None:
            nonlocal changed
            leading.append(name)
            changed.set()
            changed = trio.Event()
            await trio.sleep_forever()

        return lead

    async def until(count: int) -> None:
        with trio.fail_after(DEADLINE):
            while len(leading) < count:
                await changed.wait()

    # Not a candidate of ours: ignored when counting turns.
    raw.create(f"{parts.layout.leader(namespace)}/stray")
    async with trio.open_nursery() as nursery:
        first_scope = trio.CancelScope()

        async def stand_first() -> None:
            with first_scope:
                await first.lead(namespace, task("r1"))

        nursery.start_soon(stand_first)
        await until(1)
        nursery.start_soon(second.lead, namespace, task("r2"))
        with trio.fail_after(DEADLINE):
            while len(await second._candidates(parts.layout.leader(namespace), "look")) < 2:
                await trio.sleep(0.05)  # polling a condition with a deadline
        assert leading == ["r1"]  # the second waits its turn
        assert await second.leader_of(namespace) == "r1"

        first_scope.cancel()  # stands down: its candidate node is deleted
        await until(2)
        assert leading == ["r1", "r2"]
        assert await first.leader_of(namespace) == "r2"
        nursery.cancel_scope.cancel()


async def test_no_election_in_a_deleted_namespace(parts: Parts, namespace: str) -> None:
    leadership = Leadership(parts.session, parts.calls, "r1")

    async def never() -> None:
        pytest.fail("led a namespace that does not exist")

    with trio.fail_after(DEADLINE):
        await leadership.lead(namespace, never)  # returns: nothing to stand in
