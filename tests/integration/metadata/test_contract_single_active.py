"""The MetadataStore contract for the lines of single-active-consumer queues (``standing`` on
``add_consumer``, ``activate_consumer``, ``deactivate_consumer``, ``VhostView.lines``), on the
memory store and on ZooKeeper, each replica a session of its own."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from gateway.metadata.errors import ConditionNotMet, MissingEntity
from gateway.metadata.roles import Consumers
from gateway.metadata.store import MetadataStore, PickActive, QueueCondition
from gateway.model.consumers import LinePlace, Standing, successor
from gateway.model.entities import Queue
from tests.integration.metadata.conftest import Fleet, opened, wait_for

ROLE = Consumers  # test_contract_roles.py: every role has its contract


def first_waiting(places: Sequence[LinePlace]) -> LinePlace | None:
    return successor(places, "classic")


async def test_consumers_stand_in_registration_order_fleet_wide(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac"))
    first = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing(0, 5))
    await wait_for(b, namespace, lambda v: "sac" in v.queues)
    second = await b.add_consumer(namespace, "sac", exclusive=False, standing=Standing(3, 2000))
    third = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing(-1, 1))
    view = await wait_for(a, namespace, lambda v: len(v.lines.get("sac", ())) == 3)
    line = view.lines["sac"]
    assert [p.consumer for p in line] == [first, second, third]
    assert [p.sequence for p in line] == sorted({p.sequence for p in line})  # increasing
    assert [(p.priority, p.credit) for p in line] == [(0, 5), (3, 2000), (-1, 1)]
    assert [p.replica for p in line] == [a.replica_id, b.replica_id, a.replica_id]
    assert [p.active for p in line] == [True, False, False]  # the first, as it joined
    assert view.consumers["sac"] == 3  # counted like any consumer
    await wait_for(b, namespace, lambda v: v.lines.get("sac") == line)


async def test_only_the_chosen_consumer_of_this_replica_is_activated(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac"))
    first = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    on_a = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    await wait_for(b, namespace, lambda v: len(v.lines.get("sac", ())) == 2)
    on_b = await b.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    assert not await a.activate_consumer(namespace, "sac", first_waiting)  # one is active
    line = a.view(namespace).lines["sac"]
    assert [(p.consumer, p.active) for p in line] == [(first, True), (on_a, False), (on_b, False)]
    view = await wait_for(b, namespace, lambda v: len(v.lines["sac"]) == 3)
    assert [p.active for p in view.lines["sac"]] == [True, False, False]
    assert view.consumers["sac"] == 3

    # The active one leaves: the rule picks a's next consumer; b cannot activate it (not its
    # own), a can, once.
    await a.remove_consumer(namespace, "sac", first)
    await wait_for(b, namespace, lambda v: len(v.lines["sac"]) == 2)
    assert not await b.activate_consumer(namespace, "sac", first_waiting)
    assert await a.activate_consumer(namespace, "sac", first_waiting)
    assert not await a.activate_consumer(namespace, "sac", first_waiting)
    assert [(p.consumer, p.active) for p in a.view(namespace).lines["sac"]] == [
        (on_a, True),
        (on_b, False),
    ]

    # That one leaves too: b's becomes the choice, and b activates it.
    await a.remove_consumer(namespace, "sac", on_a)
    await wait_for(b, namespace, lambda v: [p.consumer for p in v.lines["sac"]] == [on_b])
    assert await b.activate_consumer(namespace, "sac", first_waiting)
    assert [(p.consumer, p.active) for p in b.view(namespace).lines["sac"]] == [(on_b, True)]
    await wait_for(a, namespace, lambda v: v.lines["sac"][0].active)


async def test_of_two_joining_an_empty_line_at_once_one_is_active(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac"))
    await wait_for(b, namespace, lambda v: "sac" in v.queues)

    async def join(store: MetadataStore) -> None:
        await store.add_consumer(namespace, "sac", exclusive=False, standing=Standing())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, a)
        nursery.start_soon(join, b)
    view = await wait_for(a, namespace, lambda v: len(v.lines.get("sac", ())) == 2)
    assert [p.active for p in view.lines["sac"]] == [True, False]  # the first registered


async def test_two_replicas_activating_at_once_make_one_active(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac"))
    first = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    await wait_for(b, namespace, lambda v: len(v.lines.get("sac", ())) == 2)
    await b.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    await a.remove_consumer(namespace, "sac", first)  # the active one: none is now
    await wait_for(b, namespace, lambda v: len(v.lines["sac"]) == 2)

    def mine(store: MetadataStore) -> PickActive:
        def pick(places: Sequence[LinePlace]) -> LinePlace | None:
            return next((p for p in places if p.replica == store.replica_id), None)

        return pick

    results: list[bool] = []

    async def activate(store: MetadataStore) -> None:
        results.append(await store.activate_consumer(namespace, "sac", mine(store)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(activate, a)
        nursery.start_soon(activate, b)
    assert sorted(results) == [False, True]
    view = await wait_for(a, namespace, lambda v: any(p.active for p in v.lines["sac"]))
    assert sum(p.active for p in view.lines["sac"]) == 1


async def test_stepping_down_keeps_the_place(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac"))
    first = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing(priority=5))
    await a.deactivate_consumer(namespace, "sac", first)  # joined active, steps down
    assert [p.active for p in a.view(namespace).lines["sac"]] == [False, False]
    assert await a.activate_consumer(namespace, "sac", first_waiting)  # the higher one
    line = a.view(namespace).lines["sac"]
    assert [p.active for p in line] == [False, True]
    await a.deactivate_consumer(namespace, "sac", line[1].consumer)
    after = a.view(namespace).lines["sac"]
    assert [p.active for p in after] == [False, False]
    assert [p.sequence for p in after] == [p.sequence for p in line]
    assert after[0].consumer == first


async def test_a_line_goes_with_its_replica_and_with_its_queue(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac", auto_delete=True))
    await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    assert [p.active for p in a.view(namespace).lines["sac"]] == [True]
    await wait_for(b, namespace, lambda v: "sac" in v.queues)
    on_b = await b.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    # A waiting consumer keeps an auto-delete queue in use.
    with pytest.raises(ConditionNotMet):
        await b.delete_queue(namespace, "sac", condition=QueueCondition.UNUSED)
    await a.aclose()  # the active consumer's replica dies: its record goes
    view = await wait_for(b, namespace, lambda v: len(v.lines.get("sac", ())) == 1)
    assert [(p.consumer, p.active) for p in view.lines["sac"]] == [(on_b, False)]
    assert await b.activate_consumer(namespace, "sac", first_waiting)
    assert await b.delete_queue(namespace, "sac")
    assert "sac" not in b.view(namespace).lines
    with pytest.raises(MissingEntity):
        await b.add_consumer(namespace, "sac", exclusive=False, standing=Standing())


async def test_in_line_follows_the_record_not_the_view(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("sac"))
    first = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing())
    second = await a.add_consumer(namespace, "sac", exclusive=False, standing=Standing(2))
    assert a.in_line(namespace, first) and a.in_line(namespace, second)
    await a.deactivate_consumer(namespace, "sac", first)  # replaced: still in line
    assert a.in_line(namespace, first)
    assert await a.activate_consumer(namespace, "sac", first_waiting)
    assert a.in_line(namespace, second)
    await a.remove_consumer(namespace, "sac", first)
    assert not a.in_line(namespace, first)
    plain = await a.add_consumer(namespace, "sac", exclusive=False)  # not in a line
    assert not a.in_line(namespace, plain)
