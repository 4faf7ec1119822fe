"""The Views role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper (a
store per replica, each with its own session). Opening a namespace, its views and their
versions, the namespaces the store holds, and every replica's view following every write."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gateway.amqp.fieldtable import Field
from gateway.metadata.roles import Views
from gateway.metadata.store import VhostView
from gateway.model.entities import PREDECLARED_EXCHANGES, Binding, Exchange, ExchangeType, Queue
from tests.integration.metadata.conftest import Fleet, opened, wait_for

ROLE = Views  # test_contract_roles.py: every role has its contract


async def test_open_has_the_predeclared_exchanges(fleet: Fleet, namespace: str) -> None:
    store = await fleet.replica()
    view = await store.open(namespace)
    assert {e.name: e for e in PREDECLARED_EXCHANGES} == dict(view.exchanges)
    assert store.view(namespace) == view
    assert not view.queues and not view.bindings and not view.topic_keys


async def test_view_of_an_unopened_namespace_is_refused(fleet: Fleet, namespace: str) -> None:
    store = await fleet.replica()
    with pytest.raises(KeyError):
        store.view(namespace)


async def test_list_namespaces_has_every_replicas_namespaces(fleet: Fleet, namespace: str) -> None:
    writer = await fleet.replica()
    reader = await fleet.replica()
    assert await reader.list_namespaces() == []
    odd = f"{namespace}-ünï,cødé"  # escaped in a znode name
    await writer.open(namespace)
    await writer.open(odd)
    # Only looked up, never opened nor written: the store holds nothing of it.
    assert await writer.sync_queue(f"{namespace}-looked-up", "q") is None
    # The reader opened none of them: it lists what the store holds, not its own.
    assert await reader.list_namespaces() == [namespace, odd]
    assert await writer.list_namespaces() == [namespace, odd]


async def test_versions_grow_and_changed_wakes(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
    before = store.view(namespace)
    woken: list[VhostView] = []

    async def waiter() -> None:
        woken.append(await store.changed(namespace, before.version))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert not woken
            await store.create_queue(namespace, Queue("q"))
    assert woken[0].version > before.version
    assert "q" in woken[0].queues
    after = store.view(namespace)
    assert after.version > before.version
    # A version already passed returns at once.
    with trio.fail_after(1):
        assert (await store.changed(namespace, before.version)).version == after.version
    # Nothing changes in place: the old view is still what it was.
    assert "q" not in before.queues


async def test_replicas_see_each_others_writes(fleet: Fleet, namespace: str) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    queue = Queue("q", durable=True, arguments={"x-max-priority": Field("b", 5)})
    await a.create_queue(namespace, queue)
    await a.create_exchange(namespace, Exchange("x", ExchangeType.HEADERS))
    binding = Binding("q", "x", "", {"x-match": Field("S", "any")})
    await a.add_binding(namespace, binding)
    await a.register_topic_key(namespace, "amq.topic", "k")
    view = await wait_for(b, namespace, lambda v: binding in v.bindings and bool(v.topic_keys))
    assert view.queues["q"] == queue
    assert view.exchanges["x"].type is ExchangeType.HEADERS
    # And back.
    assert await b.delete_queue(namespace, "q")
    view = await wait_for(a, namespace, lambda v: "q" not in v.queues)
    assert view.bindings == frozenset()


async def test_a_late_replica_loads_everything(fleet: Fleet, namespace: str) -> None:
    writer = await opened(fleet, namespace)
    for index in range(50):
        await writer.create_queue(namespace, Queue(f"q{index}"))
        await writer.add_binding(namespace, Binding(f"q{index}", "amq.direct", f"k{index}"))
    late = await fleet.replica()
    view = await late.open(namespace)  # complete when open returns: no waiting
    assert len(view.queues) == 50
    assert len(view.bindings) == 50


async def test_write_is_in_the_writers_view_when_it_returns(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
    for index in range(20):
        name = f"q{index}"
        await store.create_queue(namespace, Queue(name))
        assert name in store.view(namespace).queues
        await store.add_binding(namespace, Binding(name, "amq.fanout", ""))
        assert Binding(name, "amq.fanout", "") in store.view(namespace).bindings
        assert await store.delete_queue(namespace, name)
        assert name not in store.view(namespace).queues
