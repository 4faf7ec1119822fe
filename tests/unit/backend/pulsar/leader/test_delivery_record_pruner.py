"""The leader removes the delivery records of replicas gone for long, and only those."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from gateway.backend.pulsar.leader.delivery_record_pruner import DeliveryRecordPruner
from gateway.backend.pulsar.leader.scope import LeaderScope
from gateway.metadata.memory import MemoryMetadataStore

NAMESPACE = "t/n"


async def test_a_gone_replicas_record_goes_after_the_retention(
    autojump_clock: trio.testing.MockClock,
) -> None:
    leader = MemoryMetadataStore()
    dead, alive = leader.replica(), leader.replica()
    async with trio.open_nursery() as nursery:
        for store in (leader, dead, alive):
            await store.record_deliveries(NAMESPACE, b"record")
            nursery.start_soon(store.lead, NAMESPACE, trio.sleep_forever)
        await trio.sleep(1)
        await dead.aclose()
        scope = LeaderScope(cast(Any, None), leader, cast(Any, None), NAMESPACE)
        pruner = DeliveryRecordPruner(scope, retention=100.0)
        await pruner.prune()
        everyone = {leader.replica_id, dead.replica_id, alive.replica_id}
        assert await leader.delivery_recorders(NAMESPACE) == everyone
        await trio.sleep(99)
        await pruner.prune()
        assert await leader.delivery_recorders(NAMESPACE) == everyone
        await trio.sleep(1)
        await pruner.prune()
        assert await leader.delivery_recorders(NAMESPACE) == everyone - {dead.replica_id}
        await trio.sleep(1000)
        await pruner.prune()  # the live ones stay, however long
        assert await leader.delivery_recorders(NAMESPACE) == everyone - {dead.replica_id}
        nursery.cancel_scope.cancel()
