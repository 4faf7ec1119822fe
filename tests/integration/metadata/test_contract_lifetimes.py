"""The MetadataStore contract for what lives as long as a replica: exclusive owners, consumer
registrations, drain records, leadership. Run against the memory store and the ZooKeeper store
(a store per replica, each with its own session; closing one ends its session as a replica's
death would)."""

from __future__ import annotations

import pytest
import trio

from gateway.metadata.errors import ConditionNotMet, ConsumerConflict, MissingEntity
from gateway.metadata.store import REMOVE, DrainRecord, MetadataStore, QueueCondition
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.integration.metadata.conftest import DEADLINE, Fleet, wait_for


async def _opened(fleet: Fleet, namespace: str) -> MetadataStore:
    store = await fleet.replica()
    await store.open(namespace)
    return store


def _exclusive(name: str, connection: str = "conn-1") -> Queue:
    return Queue(name, exclusive=True, auto_delete=True, owner=connection)


# ---------------------------------------------------------------------- exclusive owners


async def test_an_exclusive_queue_is_owned_while_its_session_lasts(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, _exclusive("private"))
    await a.create_queue(namespace, Queue("shared"))
    assert a.view(namespace).owned == {"private"}
    await wait_for(b, namespace, lambda v: "private" in v.owned)
    # The owner is alive: the leader's delete is refused, and nothing is deleted.
    with pytest.raises(ConditionNotMet):
        await b.delete_queue(namespace, "private", condition=QueueCondition.ORPHANED)
    with pytest.raises(ConditionNotMet):  # not exclusive at all
        await b.delete_queue(namespace, "shared", condition=QueueCondition.ORPHANED)
    assert "private" in b.view(namespace).queues

    await a.aclose()  # a's replica dies: its session, and the owner record, end
    view = await wait_for(b, namespace, lambda v: "private" not in v.owned)
    assert "private" in view.queues  # the queue stays until someone deletes it
    assert await b.delete_queue(namespace, "private", condition=QueueCondition.ORPHANED)
    assert "private" not in b.view(namespace).queues
    # Declared again elsewhere, by another connection, it is owned again.
    assert await b.create_queue(namespace, _exclusive("private", "conn-2")) == _exclusive(
        "private", "conn-2"
    )
    assert b.view(namespace).owned == {"private"}


async def test_deleting_an_exclusive_queue_deletes_its_owner_record(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, _exclusive("reply"))
    assert await a.delete_queue(namespace, "reply")
    assert a.view(namespace).owned == frozenset()
    # No record is left behind to make the next declare (on any replica) fail.
    await wait_for(b, namespace, lambda v: "reply" not in v.queues)
    assert await b.create_queue(namespace, _exclusive("reply", "conn-9")) == _exclusive(
        "reply", "conn-9"
    )
    await wait_for(a, namespace, lambda v: v.owned == {"reply"})


# ---------------------------------------------------------------------- consumers


async def test_consumers_are_counted_across_replicas(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("work"))
    await wait_for(b, namespace, lambda v: "work" in v.queues)
    first = await a.add_consumer(namespace, "work", exclusive=False)
    assert a.view(namespace).consumers == {"work": 1}  # own write, at once
    second = await b.add_consumer(namespace, "work", exclusive=False)
    assert first != second
    await wait_for(a, namespace, lambda v: v.consumers.get("work") == 2)
    await wait_for(b, namespace, lambda v: v.consumers.get("work") == 2)
    await a.remove_consumer(namespace, "work", first)
    await a.remove_consumer(namespace, "work", first)  # idempotent
    await wait_for(b, namespace, lambda v: v.consumers.get("work") == 1)
    await b.remove_consumer(namespace, "work", second)
    await wait_for(a, namespace, lambda v: "work" not in v.consumers)


async def test_a_consumer_needs_its_queue(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    with pytest.raises(MissingEntity) as missing:
        await store.add_consumer(namespace, "nope", exclusive=False)
    assert (missing.value.kind, missing.value.name) == ("queue", "nope")


async def test_exclusive_consumers_exclude_every_other_consumer(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    await wait_for(b, namespace, lambda v: "q" in v.queues)
    ordinary = await a.add_consumer(namespace, "q", exclusive=False)
    with pytest.raises(ConsumerConflict):
        await b.add_consumer(namespace, "q", exclusive=True)
    await a.remove_consumer(namespace, "q", ordinary)
    exclusive = await b.add_consumer(namespace, "q", exclusive=True)
    for store, wanted in ((a, False), (a, True), (b, False)):
        with pytest.raises(ConsumerConflict):
            await store.add_consumer(namespace, "q", exclusive=wanted)
    await wait_for(a, namespace, lambda v: v.consumers.get("q") == 1)
    await b.remove_consumer(namespace, "q", exclusive)
    await a.add_consumer(namespace, "q", exclusive=False)


async def test_racing_exclusive_consumers_have_one_winner(fleet: Fleet, namespace: str) -> None:
    replicas = [await _opened(fleet, namespace) for _ in range(3)]
    await replicas[0].create_queue(namespace, Queue("contested"))
    for replica in replicas:
        await wait_for(replica, namespace, lambda v: "contested" in v.queues)
    outcomes: list[str] = []

    async def consume(store: MetadataStore, exclusive: bool) -> None:
        try:
            await store.add_consumer(namespace, "contested", exclusive=exclusive)
            outcomes.append("exclusive" if exclusive else "ordinary")
        except ConsumerConflict:
            outcomes.append("refused")

    with trio.fail_after(DEADLINE):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume, replicas[0], True)
            nursery.start_soon(consume, replicas[1], True)
            nursery.start_soon(consume, replicas[2], False)
    # Either one exclusive consumer and nothing else, or the ordinary one and nothing else.
    assert sorted(outcomes) in (
        ["exclusive", "refused", "refused"],
        ["ordinary", "refused", "refused"],
    ), outcomes


async def test_if_unused_sees_consumers_on_every_replica(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("busy"))
    await wait_for(b, namespace, lambda v: "busy" in v.queues)
    consumer = await b.add_consumer(namespace, "busy", exclusive=False)
    with pytest.raises(ConditionNotMet):
        await a.delete_queue(namespace, "busy", condition=QueueCondition.UNUSED)
    assert "busy" in a.view(namespace).queues
    await b.remove_consumer(namespace, "busy", consumer)
    assert await a.delete_queue(namespace, "busy", condition=QueueCondition.UNUSED)


async def test_an_auto_delete_queue_is_abandoned_once_its_last_consumer_anywhere_goes(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("temp", auto_delete=True))
    await a.create_queue(namespace, Queue("kept"))
    abandoned = QueueCondition.ABANDONED
    # Never consumed (e.g. only Basic.Get): never auto-deleted, as in RabbitMQ.
    with pytest.raises(ConditionNotMet):
        await a.delete_queue(namespace, "temp", condition=abandoned)
    await wait_for(b, namespace, lambda v: "temp" in v.queues)
    on_a = await a.add_consumer(namespace, "temp", exclusive=False)
    on_b = await b.add_consumer(namespace, "temp", exclusive=False)
    await a.remove_consumer(namespace, "temp", on_a)
    with pytest.raises(ConditionNotMet):  # b's consumer remains
        await a.delete_queue(namespace, "temp", condition=abandoned)
    await b.remove_consumer(namespace, "temp", on_b)
    assert await a.delete_queue(namespace, "temp", condition=abandoned)
    # Not auto-delete: never abandoned.
    consumer = await b.add_consumer(namespace, "kept", exclusive=False)
    await b.remove_consumer(namespace, "kept", consumer)
    with pytest.raises(ConditionNotMet):
        await a.delete_queue(namespace, "kept", condition=abandoned)


async def test_consumers_go_with_their_replicas_session(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await b.create_queue(namespace, Queue("temp", auto_delete=True))
    await wait_for(a, namespace, lambda v: "temp" in v.queues)
    await a.add_consumer(namespace, "temp", exclusive=True)
    await wait_for(b, namespace, lambda v: v.consumers.get("temp") == 1)
    await a.aclose()
    await wait_for(b, namespace, lambda v: "temp" not in v.consumers)
    # The exclusive hold went too, and the queue counts as abandoned.
    consumer = await b.add_consumer(namespace, "temp", exclusive=True)
    await b.remove_consumer(namespace, "temp", consumer)
    assert await b.delete_queue(namespace, "temp", condition=QueueCondition.ABANDONED)


# ---------------------------------------------------------------------- drains


async def test_drain_records_are_written_with_the_unbind_and_the_rebind(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    await a.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT))
    binding = Binding("q", "x", "k")
    await a.add_binding(namespace, binding)
    draining = DrainRecord(end=(7, 3))
    # A binding that is not there writes no record.
    assert not await a.remove_binding(namespace, Binding("q", "x", "other"), drains={"t": draining})
    assert a.view(namespace).drains == {}
    assert await a.remove_binding(namespace, binding, drains={"x__k": draining})
    assert a.view(namespace).drains == {("q", "x__k"): draining}
    await wait_for(b, namespace, lambda v: v.drains == {("q", "x__k"): draining})
    resumed = DrainRecord(end=(7, 3), resumed=(9, 0))
    assert await b.add_binding(namespace, binding, drains={"x__k": resumed})
    assert b.view(namespace).drains == {("q", "x__k"): resumed}
    # Replaced in place: the other replica sees the new record too.
    await wait_for(a, namespace, lambda v: v.drains == {("q", "x__k"): resumed})
    assert resumed.excludes((8, 0)) and not resumed.excludes((9, 1))
    assert not resumed.excludes((7, 3))


async def test_drain_records_change_only_at_the_version_read(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    await a.add_binding(namespace, Binding("q", "amq.fanout", ""))
    await a.remove_binding(
        namespace, Binding("q", "amq.fanout", ""), drains={"t": DrainRecord((1, 1))}
    )
    read = await b.read_drain(namespace, "q", "t")
    assert read is not None and read[0] == DrainRecord((1, 1))
    _record, version = read
    # Someone else changes it meanwhile: the stale update is refused.
    await a.add_binding(
        namespace, Binding("q", "amq.fanout", ""), drains={"t": DrainRecord((1, 1), (2, 2))}
    )
    assert not await b.update_drain(namespace, "q", "t", REMOVE, version=version)
    read = await b.read_drain(namespace, "q", "t")
    assert read is not None and read[0] == DrainRecord((1, 1), (2, 2))
    assert await b.update_drain(namespace, "q", "t", REMOVE, version=read[1])
    await wait_for(a, namespace, lambda v: v.drains == {("q", "t"): REMOVE})
    read = await a.read_drain(namespace, "q", "t")
    assert read is not None
    assert await a.update_drain(namespace, "q", "t", None, version=read[1])
    assert a.view(namespace).drains == {}
    assert await a.read_drain(namespace, "q", "t") is None
    assert not await a.update_drain(namespace, "q", "t", None, version=read[1])


async def test_deleting_a_queue_deletes_its_records_and_records_its_subscriptions(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    await a.create_queue(namespace, Queue("other"))
    await a.add_binding(namespace, Binding("q", "amq.direct", "k"))
    await a.remove_binding(
        namespace, Binding("q", "amq.direct", "k"), drains={"old": DrainRecord((1, 1))}
    )
    await a.add_binding(namespace, Binding("other", "amq.direct", "k"))
    await a.remove_binding(
        namespace, Binding("other", "amq.direct", "k"), drains={"old": DrainRecord((1, 1))}
    )
    await wait_for(b, namespace, lambda v: "q" in v.queues)
    await b.add_consumer(namespace, "q", exclusive=False)
    assert await a.delete_queue(namespace, "q", subscriptions=["old", "amq.default__q"])
    expected = {
        ("q", "old"): REMOVE,
        ("q", "amq.default__q"): REMOVE,
        ("other", "old"): DrainRecord((1, 1)),
    }
    assert a.view(namespace).drains == expected
    view = await wait_for(b, namespace, lambda v: "q" not in v.queues and v.drains == expected)
    assert "q" not in view.consumers
    # A queue of the same name starts afresh.
    await b.create_queue(namespace, Queue("q"))
    assert "q" not in b.view(namespace).consumers


async def test_an_exchange_if_unused_is_kept_while_it_has_a_binding(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_exchange(namespace, Exchange("x", ExchangeType.FANOUT, auto_delete=True))
    await a.create_queue(namespace, Queue("q"))
    await wait_for(b, namespace, lambda v: "q" in v.queues and "x" in v.exchanges)
    await b.add_binding(namespace, Binding("q", "x", ""))
    # a may not have seen b's binding yet: the store checks, not the view.
    with pytest.raises(ConditionNotMet):
        await a.delete_exchange(namespace, "x", if_unused=True)
    await b.remove_binding(namespace, Binding("q", "x", ""))
    assert await a.delete_exchange(namespace, "x", if_unused=True)
    assert not await a.delete_exchange(namespace, "x", if_unused=True)


async def test_deleting_an_exchange_writes_the_drains_of_its_bindings(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT))
    for queue in ("q1", "q2"):
        await a.create_queue(namespace, Queue(queue))
        await a.add_binding(namespace, Binding(queue, "x", "k"))
    # q2 drained an earlier unbind there already: its record is replaced.
    await a.remove_binding(namespace, Binding("q2", "x", "k"), drains={"x__k": DrainRecord((1, 1))})
    await a.add_binding(namespace, Binding("q2", "x", "k"))
    record = DrainRecord((3, 4))
    drains = {("q1", "x__k"): record, ("q2", "x__k"): record}
    assert await a.delete_exchange(namespace, "x", drains=drains)
    assert a.view(namespace).drains == drains
    view = await wait_for(b, namespace, lambda v: v.drains == drains)
    assert "x" not in view.exchanges and not view.bindings


# ---------------------------------------------------------------------- leadership


async def test_one_replica_leads_and_leadership_moves_when_it_goes(
    fleet: Fleet, namespace: str
) -> None:
    replicas = [await _opened(fleet, namespace) for _ in range(3)]
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
