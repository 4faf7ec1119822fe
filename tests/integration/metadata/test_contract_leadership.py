"""The Leadership role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper
(a store per replica, each with its own session). One leader per namespace, and leadership
moving when its replica goes."""

from __future__ import annotations

import trio
import trio.testing

from gateway.metadata.roles import Leadership
from gateway.metadata.store import MetadataStore
from tests.integration.metadata.conftest import DEADLINE, Fleet, opened

ROLE = Leadership  # test_contract_roles.py: every role has its contract


async def test_one_replica_leads_and_leadership_moves_when_it_goes(
    fleet: Fleet, namespace: str
) -> None:
    replicas = [await opened(fleet, namespace) for _ in range(3)]
    leading: list[str] = []
    changed = trio.Event()

    async def serve(store: MetadataStore) -> None:
        leading.append(store.replica_id)
        changed.set()
        try:
            await trio.sleep_forever()
        finally:
            leading.remove(store.replica_id)

    async def wait_leading(count: int) -> None:
        nonlocal changed
        with trio.fail_after(DEADLINE * 3):
            while len(leading) != count:
                await changed.wait()
                changed = trio.Event()

    async def stand(store: MetadataStore) -> None:
        await store.lead(namespace, lambda: serve(store))

    async with trio.open_nursery() as nursery:
        for store in replicas:
            nursery.start_soon(stand, store)
        await wait_leading(1)
        first = leading[0]
        assert await replicas[0].leader_of(namespace) == first
        [leader] = [store for store in replicas if store.replica_id == first]
        await leader.aclose()  # the leader dies
        with trio.fail_after(DEADLINE * 3):
            while not leading or leading[0] == first:
                await changed.wait()
                changed = trio.Event()
        assert len(leading) == 1
        survivor = next(store for store in replicas if store is not leader)
        assert await survivor.leader_of(namespace) == leading[0]
        nursery.cancel_scope.cancel()
