"""The Bindings role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper
(a store per replica, each with its own session). Queue bindings: told apart by their exact
arguments, needing their queue and exchange, one winner of a race, none outliving its queue
(exchange-to-exchange bindings: test_contract_exchange_bindings.py)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gateway.amqp.fieldtable import Field
from gateway.metadata.errors import MissingEntity
from gateway.metadata.roles import Bindings
from gateway.metadata.store import MetadataStore
from gateway.model.entities import Binding, Queue
from tests.integration.metadata.conftest import Fleet, opened, wait_for

ROLE = Bindings  # test_contract_roles.py: every role has its contract


async def test_bindings_add_and_remove(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
    await store.create_queue(namespace, Queue("q"))
    binding = Binding("q", "amq.direct", "k")
    assert await store.add_binding(namespace, binding) is True
    assert await store.add_binding(namespace, binding) is False
    assert store.view(namespace).bindings == {binding}
    assert await store.remove_binding(namespace, binding) is True
    assert await store.remove_binding(namespace, binding) is False
    assert store.view(namespace).bindings == frozenset()


async def test_bindings_differing_only_in_arguments_are_distinct(
    fleet: Fleet, namespace: str
) -> None:
    store = await opened(fleet, namespace)
    await store.create_queue(namespace, Queue("q"))
    plain = Binding("q", "amq.headers", "")
    match_all = Binding("q", "amq.headers", "", {"x-match": Field("S", "all"), "a": Field("b", 1)})
    # Same values, other types: other arguments (RabbitMQ compares them as typed terms).
    match_all_unsigned = Binding(
        "q", "amq.headers", "", {"x-match": Field("S", "all"), "a": Field("B", 1)}
    )
    # Same table, keys in another order: the same binding.
    reordered = Binding("q", "amq.headers", "", {"a": Field("b", 1), "x-match": Field("S", "all")})
    assert await store.add_binding(namespace, plain)
    assert await store.add_binding(namespace, match_all)
    assert await store.add_binding(namespace, match_all_unsigned)
    assert not await store.add_binding(namespace, reordered)
    assert store.view(namespace).bindings == {plain, match_all, match_all_unsigned}
    assert await store.remove_binding(namespace, match_all)
    assert store.view(namespace).bindings == {plain, match_all_unsigned}
    stored = next(b for b in store.view(namespace).bindings if b.arguments)
    assert stored.arguments["a"] == Field("B", 1)


async def test_a_binding_needs_its_queue_and_exchange(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
    await store.create_queue(namespace, Queue("q"))
    with pytest.raises(MissingEntity) as missing_queue:
        await store.add_binding(namespace, Binding("nope", "amq.direct", "k"))
    assert (missing_queue.value.kind, missing_queue.value.name) == ("queue", "nope")
    with pytest.raises(MissingEntity) as missing_exchange:
        await store.add_binding(namespace, Binding("q", "nope", "k"))
    assert (missing_exchange.value.kind, missing_exchange.value.name) == ("exchange", "nope")
    assert store.view(namespace).bindings == frozenset()


async def test_concurrent_binds_have_one_winner(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    await wait_for(b, namespace, lambda v: "q" in v.queues)
    outcomes: list[bool] = []

    async def bind(store: MetadataStore) -> None:
        outcomes.append(await store.add_binding(namespace, Binding("q", "amq.direct", "k")))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bind, a)
            nursery.start_soon(bind, b)
    assert sorted(outcomes) == [False, True]
    for store in (a, b):
        assert store.view(namespace).bindings == {Binding("q", "amq.direct", "k")}


async def test_delete_racing_binds_leaves_no_orphan(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    await wait_for(b, namespace, lambda v: "q" in v.queues)
    bound: list[Binding] = []

    async def bind_many() -> None:
        for index in range(20):
            binding = Binding("q", "amq.direct", f"k{index}")
            try:
                await b.add_binding(namespace, binding)
            except MissingEntity:
                return
            bound.append(binding)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bind_many)
            await a.delete_queue(namespace, "q")
    # Whatever the interleaving: no binding outlives its queue, even on a fresh replica.
    late = await opened(fleet, namespace)
    await late.create_queue(namespace, Queue("q"))
    assert late.view(namespace).bindings == frozenset()
    view = await wait_for(a, namespace, lambda v: "q" in v.queues)
    assert view.bindings == frozenset()
