"""The Consumers role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper
(a store per replica, each with its own session). Consumer records: counted across replicas,
exclusive ones excluding every other, going with their replica's session, and what the
conditional queue deletes see of them (the lines of single-active-consumer queues:
test_contract_single_active.py)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gateway.metadata.errors import ConditionNotMet, ConsumerConflict, MissingEntity
from gateway.metadata.roles import Consumers
from gateway.metadata.store import MetadataStore, QueueCondition
from gateway.model.entities import Queue
from tests.integration.metadata.conftest import DEADLINE, Fleet, opened, wait_for

ROLE = Consumers  # test_contract_roles.py: every role has its contract


async def test_consumers_are_counted_across_replicas(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    store = await opened(fleet, namespace)
    with pytest.raises(MissingEntity) as missing:
        await store.add_consumer(namespace, "nope", exclusive=False)
    assert (missing.value.kind, missing.value.name) == ("queue", "nope")


async def test_exclusive_consumers_exclude_every_other_consumer(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    replicas = [await opened(fleet, namespace) for _ in range(3)]
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
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
