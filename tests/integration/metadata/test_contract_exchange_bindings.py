"""The MetadataStore contract for exchange-to-exchange bindings (Exchange.Bind), run against
the memory store and the ZooKeeper store: a record of their own, told apart by their exact
arguments, existing only while both exchanges do, removed with either exchange, counted by
if-unused only where the exchange is the source (RabbitMQ's ``has_for_source``), written with
drain records in one transaction, read back from the store at once by another replica."""

from __future__ import annotations

import pytest
import trio

from gateway.amqp.fieldtable import Field
from gateway.metadata.errors import ConditionNotMet, MissingEntity
from gateway.metadata.roles import Bindings
from gateway.metadata.store import DrainRecord, ExchangeEdges, MetadataStore
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue
from gateway.model.graph import RouteSnapshot
from tests.integration.metadata.conftest import Fleet, wait_for

ROLE = Bindings  # test_contract_roles.py: every role has its contract

ODD = ["a/b", "50%", "a,b", ".", "ünï cødé ✓", ",lead", "%"]


async def _opened(fleet: Fleet, namespace: str, *exchanges: str) -> MetadataStore:
    store = await fleet.replica()
    await store.open(namespace)
    for name in exchanges:
        await store.create_exchange(namespace, Exchange(name, ExchangeType.TOPIC))
    return store


async def test_add_and_remove(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace, "src", "dst")
    binding = ExchangeBinding("src", "dst", "a.*")
    assert await store.add_exchange_binding(namespace, binding) is True
    assert await store.add_exchange_binding(namespace, binding) is False
    assert store.view(namespace).exchange_bindings == {binding}
    assert store.view(namespace).bindings == frozenset()  # not a queue binding
    assert await store.remove_exchange_binding(namespace, binding) is True
    assert await store.remove_exchange_binding(namespace, binding) is False
    assert store.view(namespace).exchange_bindings == frozenset()


async def test_arguments_self_bindings_and_odd_names(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace, *ODD)
    headers = {"x-match": Field("S", "any"), "a": Field("b", 1)}
    bindings = {
        ExchangeBinding("a/b", "50%", ""),
        ExchangeBinding("a/b", "50%", "", headers),
        ExchangeBinding("a/b", "50%", "", {"x-match": Field("S", "any"), "a": Field("B", 1)}),
        ExchangeBinding(".", ".", "k"),  # an exchange bound to itself
        ExchangeBinding("ünï cødé ✓", ",lead", "a,b/%"),
        ExchangeBinding(",lead", "%", ",,"),
    }
    for binding in bindings:
        assert await store.add_exchange_binding(namespace, binding)
    reordered = ExchangeBinding(
        "a/b", "50%", "", {"a": Field("b", 1), "x-match": headers["x-match"]}
    )
    assert not await store.add_exchange_binding(namespace, reordered)
    assert store.view(namespace).exchange_bindings == bindings
    late = await _opened(fleet, namespace)
    view = await wait_for(late, namespace, lambda v: v.exchange_bindings == bindings)
    stored = next(b for b in view.exchange_bindings if b.arguments.get("a") == Field("B", 1))
    assert stored.arguments["a"].kind == "B"
    assert await late.remove_exchange_binding(namespace, ExchangeBinding(".", ".", "k"))
    await wait_for(store, namespace, lambda v: len(v.exchange_bindings) == len(bindings) - 1)


async def test_both_exchanges_must_exist_the_source_is_named_first(
    fleet: Fleet, namespace: str
) -> None:
    store = await _opened(fleet, namespace, "x")
    for binding, missing in (
        (ExchangeBinding("nope", "also-nope"), "nope"),
        (ExchangeBinding("nope", "x"), "nope"),
        (ExchangeBinding("x", "nope"), "nope"),
    ):
        with pytest.raises(MissingEntity) as raised:
            await store.add_exchange_binding(namespace, binding)
        assert (raised.value.kind, raised.value.name) == ("exchange", missing)
    assert store.view(namespace).exchange_bindings == frozenset()


async def test_deleting_either_exchange_removes_the_binding(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace, "a", "b", "c")
    await store.create_queue(namespace, Queue("q"))
    ab, bc, ca, bb = (
        ExchangeBinding("a", "b", "k"),
        ExchangeBinding("b", "c", "k"),
        ExchangeBinding("c", "a", "k"),
        ExchangeBinding("b", "b", "k"),
    )
    for binding in (ab, bc, ca, bb):
        await store.add_exchange_binding(namespace, binding)
    await store.add_binding(namespace, Binding("q", "b", "k"))
    other = await _opened(fleet, namespace)
    await wait_for(other, namespace, lambda v: len(v.exchange_bindings) == 4)
    assert await other.delete_exchange(namespace, "b")
    for replica in (other, store):
        view = await wait_for(replica, namespace, lambda v: "b" not in v.exchanges)
        assert view.exchange_bindings == {ca} and view.bindings == frozenset()
    # Re-created, it has none of them; a fresh replica finds none either.
    await store.create_exchange(namespace, Exchange("b", ExchangeType.TOPIC))
    late = await _opened(fleet, namespace)
    assert late.view(namespace).exchange_bindings == {ca}
    assert await late.sync_edges_of(namespace, "b") == ExchangeEdges()


async def test_if_unused_counts_only_bindings_the_exchange_is_the_source_of(
    fleet: Fleet, namespace: str
) -> None:
    store = await _opened(fleet, namespace, "upstream", "middle", "downstream")
    await store.add_exchange_binding(namespace, ExchangeBinding("upstream", "middle"))
    await store.add_exchange_binding(namespace, ExchangeBinding("middle", "downstream"))
    with pytest.raises(ConditionNotMet):
        await store.delete_exchange(namespace, "middle", if_unused=True)
    assert await store.delete_exchange(namespace, "downstream", if_unused=True)
    # Now "middle" is only a destination: if-unused deletes it, and its binding with it.
    assert await store.delete_exchange(namespace, "middle", if_unused=True)
    assert store.view(namespace).exchange_bindings == frozenset()
    await store.create_queue(namespace, Queue("q"))
    await store.add_binding(namespace, Binding("q", "upstream", ""))
    with pytest.raises(ConditionNotMet):
        await store.delete_exchange(namespace, "upstream", if_unused=True)


async def test_another_replica_reads_the_edges_at_once(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace, "x", "y")
    b = await _opened(fleet, namespace)
    await a.create_queue(namespace, Queue("q"))
    for round_ in range(5):  # the watch may win now and then; the sync always finds it
        await a.add_exchange_binding(namespace, ExchangeBinding("x", "y", f"k{round_}"))
        await a.add_binding(namespace, Binding("q", "x", f"q{round_}"))
        edges = await b.sync_edges_of(namespace, "x")
        assert ("y", f"k{round_}") in edges.outgoing and ("q", f"q{round_}") in edges.queues
        assert ("x", f"k{round_}") in (await b.sync_edges_of(namespace, "y")).incoming
    edges = await b.sync_edges_of(namespace, "x")
    assert edges.incoming == frozenset()
    assert edges.outgoing == {("y", f"k{n}") for n in range(5)}
    assert await b.sync_bindings_of(namespace, "x") == {("q", f"q{n}") for n in range(5)}
    await a.add_exchange_binding(namespace, ExchangeBinding("x", "x", "self"))
    self_edges = await b.sync_edges_of(namespace, "x")
    assert ("x", "self") in self_edges.outgoing and ("x", "self") in self_edges.incoming
    assert await b.sync_edges_of(namespace, "nope") == ExchangeEdges()


async def test_drain_records_are_written_with_the_bind_and_the_unbind(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace, "x", "y")
    b = await _opened(fleet, namespace)
    binding = ExchangeBinding("x", "y", "k")
    via = RouteSnapshot(
        (Exchange("x", ExchangeType.HEADERS), Exchange("y", ExchangeType.DIRECT)),
        (Binding("q", "y", "k"),),
        (ExchangeBinding("x", "y", "", {"x-match": Field("S", "any"), "h": Field("I", 5)}),),
    )
    judged = (((5, 1), via), ((7, 3), RouteSnapshot()))
    draining = {("q", "x"): DrainRecord((7, 3), (7, 3), judged), ("r", "x"): DrainRecord((7, 3))}
    await a.add_exchange_binding(namespace, binding)
    assert not await a.remove_exchange_binding(
        namespace, ExchangeBinding("x", "y", "other"), drains=draining
    )
    assert a.view(namespace).drains == {}
    assert await a.remove_exchange_binding(namespace, binding, drains=draining)
    assert a.view(namespace).drains == draining
    view = await wait_for(b, namespace, lambda v: v.drains == draining)
    assert view.drains[("q", "x")].via == judged
    resumed = {("r", "x"): DrainRecord((7, 3), (9, 1))}
    assert await b.add_exchange_binding(namespace, binding, drains=resumed)
    expected = {**draining, **resumed}
    assert b.view(namespace).drains == expected
    await wait_for(a, namespace, lambda v: v.drains == expected)
    record = await a.read_drain(namespace, "q", "x")
    assert record is not None and record[0].via == judged


async def test_concurrent_binds_have_one_winner(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace, "x", "y")
    b = await _opened(fleet, namespace)
    await wait_for(b, namespace, lambda v: "y" in v.exchanges)
    outcomes: list[bool] = []

    async def bind(store: MetadataStore) -> None:
        outcomes.append(await store.add_exchange_binding(namespace, ExchangeBinding("x", "y")))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bind, a)
            nursery.start_soon(bind, b)
    assert sorted(outcomes) == [False, True]


async def test_delete_racing_binds_leaves_no_orphan(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace, "x", "y")
    b = await _opened(fleet, namespace)
    await wait_for(b, namespace, lambda v: "y" in v.exchanges)

    async def bind_many() -> None:
        for index in range(20):
            try:
                await b.add_exchange_binding(namespace, ExchangeBinding("x", "y", f"k{index}"))
                await b.add_exchange_binding(namespace, ExchangeBinding("y", "x", f"k{index}"))
            except MissingEntity:
                return

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bind_many)
            await a.delete_exchange(namespace, "y")
    # Whatever the interleaving: no binding outlives its exchange, even on a fresh replica.
    late = await _opened(fleet, namespace)
    await late.create_exchange(namespace, Exchange("y", ExchangeType.TOPIC))
    assert late.view(namespace).exchange_bindings == frozenset()
    assert await late.sync_edges_of(namespace, "x") == ExchangeEdges()


async def test_a_binder_reads_whether_the_namespace_has_exchange_bindings(
    fleet: Fleet, namespace: str
) -> None:
    """The queue binder's cheap half of the handshake (binding_subscriptions.py): read right
    after its own write, it sees an exchange binding written before that write, on any
    replica; without one, the binder lists no exchange's bindings."""
    a = await _opened(fleet, namespace, "x", "y")
    b = await _opened(fleet, namespace)
    await b.create_queue(namespace, Queue("q"))
    await b.add_binding(namespace, Binding("q", "x", "k"))
    assert await b.sync_has_exchange_bindings(namespace) is False
    await a.add_exchange_binding(namespace, ExchangeBinding("x", "y", "k"))
    # b's next write is ordered after a's: the read right after it sees a's exchange binding.
    await b.add_binding(namespace, Binding("q", "y", "k"))
    assert await b.sync_has_exchange_bindings(namespace) is True
