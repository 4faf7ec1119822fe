"""The leader's reaper over the memory store: what it deletes when a replica's session ends,
after a grace tick, and what it leaves (owners alive, never-consumed auto-delete queues)."""

from __future__ import annotations

from typing import cast

from gateway.backend.pulsar.leader import NamespaceLeader
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import QueueCondition
from gateway.model.entities import Queue
from gateway.pulsar.admin import PulsarAdmin

NS = "t/n"


class FakeVhost:
    """Stands in for the leader's PulsarVirtualHost: deletes in the store, no Pulsar."""

    def __init__(self, store: MemoryMetadataStore) -> None:
        self.store = store
        self.asked: list[tuple[str, QueueCondition | None]] = []

    async def drop_queue(self, name: str, *, condition: QueueCondition | None = None) -> bool:
        self.asked.append((name, condition))
        return await self.store.delete_queue(NS, name, condition=condition)


async def test_the_reaper_deletes_what_a_dead_replica_kept_alive() -> None:
    dying = MemoryMetadataStore()
    leading = dying.replica()
    await dying.open(NS)
    await leading.open(NS)
    await dying.create_queue(NS, Queue("private", exclusive=True, auto_delete=True, owner="c1"))
    await dying.create_queue(NS, Queue("temp", auto_delete=True))
    await dying.create_queue(NS, Queue("never", auto_delete=True))
    await dying.create_queue(NS, Queue("plain"))
    await dying.add_consumer(NS, "temp", exclusive=False)
    await dying.add_consumer(NS, "plain", exclusive=False)
    vhost = FakeVhost(leading)
    leader = NamespaceLeader(cast(PulsarVirtualHost, vhost), leading, cast(PulsarAdmin, None), NS)

    for _ in range(3):  # all alive: the auto-delete ones without consumers are asked once
        await leader.reap()
    assert sorted(vhost.asked) == [
        ("never", QueueCondition.ABANDONED),
        ("private", QueueCondition.ABANDONED),
    ]
    assert set(leading.view(NS).queues) == {"private", "temp", "never", "plain"}

    await dying.aclose()  # the replica dies: its session's records go
    vhost.asked.clear()
    await leader.reap()  # candidates now, deleted only if still candidates a tick later
    assert vhost.asked == []
    await leader.reap()
    assert sorted(vhost.asked) == [
        ("private", QueueCondition.ORPHANED),
        ("temp", QueueCondition.ABANDONED),
    ]
    assert set(leading.view(NS).queues) == {"never", "plain"}
    vhost.asked.clear()
    await leader.reap()
    assert vhost.asked == []


async def test_a_queue_that_gets_a_consumer_again_is_kept() -> None:
    store = MemoryMetadataStore()
    other = store.replica()
    await store.open(NS)
    await store.create_queue(NS, Queue("temp", auto_delete=True))
    consumer = await other.add_consumer(NS, "temp", exclusive=False)
    vhost = FakeVhost(store)
    leader = NamespaceLeader(cast(PulsarVirtualHost, vhost), store, cast(PulsarAdmin, None), NS)
    await leader.reap()
    await other.remove_consumer(NS, "temp", consumer)
    await leader.reap()  # a candidate since this tick
    await other.add_consumer(NS, "temp", exclusive=False)  # back before the next tick
    await leader.reap()
    assert vhost.asked == []
    assert "temp" in store.view(NS).queues
