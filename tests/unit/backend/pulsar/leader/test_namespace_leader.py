"""The leader's reaper over the memory store: what it deletes when a replica's session ends,
after a grace tick, and what it leaves (owners alive, never-consumed auto-delete queues)."""

from __future__ import annotations

from typing import cast

import trio

from gateway.backend.pulsar.leader.namespace_leader import NamespaceLeader
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import QueueCondition
from gateway.model.entities import Queue
from gateway.pulsar.admin import PulsarAdmin

NS = "t/n"
GRACE = 5.0


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


async def test_a_replica_back_within_the_grace_keeps_its_queues(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Issue 17: a replica's session expired during a partition, and the leader saw its
    # exclusive queue without an owner and its auto-delete queue without consumers. The
    # replica claims its records again when it is back: within the grace, nothing is deleted.
    store = MemoryMetadataStore()
    cut_off = store.replica()
    await store.open(NS)
    await cut_off.open(NS)
    await cut_off.create_queue(NS, Queue("private", exclusive=True, owner="c1"))
    await cut_off.create_queue(NS, Queue("temp", auto_delete=True))
    consumer = await cut_off.add_consumer(NS, "temp", exclusive=False)
    vhost = FakeVhost(store)
    leader = NamespaceLeader(
        cast(PulsarVirtualHost, vhost), store, cast(PulsarAdmin, None), NS, grace=GRACE
    )
    await leader.reap()

    # The session expired: its records went (the memory store has no sessions to expire:
    # its records are taken out of the shared state, and put back below as the ZooKeeper
    # store's claim-again does).
    state = store._shared.namespaces[NS]
    owner, record = state.owners.pop("private"), state.consumers.pop(consumer)
    state.touch()
    for _ in range(int(GRACE) - 1):  # a reaper tick every second, short of the grace
        await leader.reap()
        await trio.sleep(1.0)
    await leader.reap()
    assert vhost.asked == []
    state.owners["private"], state.consumers[consumer] = owner, record  # back: claimed again
    state.touch()
    await trio.sleep(GRACE)
    await leader.reap()
    await leader.reap()
    assert vhost.asked == []
    assert set(store.view(NS).queues) == {"private", "temp"}

    # Gone for good this time: deleted once they have been candidates for the grace.
    await cut_off.aclose()
    await leader.reap()
    await trio.sleep(GRACE - 1.0)
    await leader.reap()
    assert vhost.asked == []
    await trio.sleep(1.0)
    await leader.reap()
    assert sorted(vhost.asked) == [
        ("private", QueueCondition.ORPHANED),
        ("temp", QueueCondition.ABANDONED),
    ]
