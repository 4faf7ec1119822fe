"""The MetadataStore contract, run against the memory store and the ZooKeeper store.

Every test gets a fleet of "replicas" (for memory: one shared store; for ZooKeeper: a store
and a session per replica under a prefix of the test's own) and a namespace of its own.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
import trio
import trio.testing

from gateway.amqp.fieldtable import Field
from gateway.metadata.errors import MissingEntity
from gateway.metadata.store import MetadataStore, VhostView
from gateway.model.entities import (
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeType,
    Queue,
)
from tests.integration.metadata.conftest import Fleet, wait_for

ARGUMENTS = {
    "x-max-length": Field("I", 10),
    "x-queue-type": Field("S", "classic"),
    "x-expires": Field("l", 60_000),
    "x-ratio": Field("D", Decimal("1.50")),
    "x-nested": Field("F", {"b": Field("u", 7), "a": Field("A", [Field("t", True)])}),
}

# Names that are awkward as znode names: separators, escapes, dots, non-ASCII, control-free
# but spaced, and the empty routing key.
ODD_NAMES = ["a/b", "50%", "a,b", ".", "..", "ünï cødé ✓", " lead", "amq.gen-Xy_z:1@h#*"]


async def _opened(fleet: Fleet, namespace: str) -> MetadataStore:
    store = await fleet.replica()
    await store.open(namespace)
    return store


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


async def test_exchange_create_get_delete(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    exchange = Exchange("orders", ExchangeType.TOPIC, durable=True, arguments=ARGUMENTS)
    assert await store.create_exchange(namespace, exchange) == exchange
    stored = store.view(namespace).exchanges["orders"]
    assert stored == exchange
    assert stored.arguments["x-max-length"].kind == "I"  # the AMQP type is kept
    assert stored.arguments["x-ratio"] == Field("D", Decimal("1.50"))
    assert await store.delete_exchange(namespace, "orders") is True
    assert "orders" not in store.view(namespace).exchanges
    assert await store.delete_exchange(namespace, "orders") is False


async def test_queue_create_get_delete(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    queue = Queue("jobs", durable=True, arguments=ARGUMENTS)
    private = Queue("reply", exclusive=True, auto_delete=True, owner="conn-1")
    assert await store.create_queue(namespace, queue) == queue
    assert await store.create_queue(namespace, private) == private
    view = store.view(namespace)
    assert view.queues == {"jobs": queue, "reply": private}
    assert view.queues["reply"].owner == "conn-1"
    assert await store.delete_queue(namespace, "jobs") is True
    assert await store.delete_queue(namespace, "jobs") is False
    assert set(store.view(namespace).queues) == {"reply"}


async def test_create_if_absent_returns_what_the_store_holds(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    first = Queue("q", durable=True)
    assert await store.create_queue(namespace, first) == first
    # A redeclare never modifies: the stored queue comes back, for the caller to compare.
    assert await store.create_queue(namespace, Queue("q", durable=False)) == first
    exchange = Exchange("x", ExchangeType.FANOUT)
    assert await store.create_exchange(namespace, exchange) == exchange
    assert await store.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT)) == exchange
    assert store.view(namespace).queues["q"] == first


async def test_odd_names_round_trip(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    for name in ODD_NAMES:
        await store.create_exchange(namespace, Exchange(name, ExchangeType.TOPIC))
        await store.create_queue(namespace, Queue(name))
        assert await store.add_binding(namespace, Binding(name, name, name))
        assert await store.register_topic_key(namespace, name, name)
    assert await store.add_binding(namespace, Binding(ODD_NAMES[0], "amq.direct", ""))
    assert await store.register_topic_key(namespace, "amq.topic", "")
    other = await _opened(fleet, namespace)
    view = await wait_for(other, namespace, lambda v: len(v.bindings) == len(ODD_NAMES) + 1)
    assert set(ODD_NAMES) <= set(view.exchanges)
    assert set(ODD_NAMES) == set(view.queues)
    assert {Binding(n, n, n) for n in ODD_NAMES} | {Binding(ODD_NAMES[0], "amq.direct", "")} == (
        view.bindings
    )
    assert {n: frozenset({n}) for n in ODD_NAMES} | {"amq.topic": frozenset({""})} == dict(
        view.topic_keys
    )


async def test_bindings_add_and_remove(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
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
    store = await _opened(fleet, namespace)
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
    store = await _opened(fleet, namespace)
    await store.create_queue(namespace, Queue("q"))
    with pytest.raises(MissingEntity) as missing_queue:
        await store.add_binding(namespace, Binding("nope", "amq.direct", "k"))
    assert (missing_queue.value.kind, missing_queue.value.name) == ("queue", "nope")
    with pytest.raises(MissingEntity) as missing_exchange:
        await store.add_binding(namespace, Binding("q", "nope", "k"))
    assert (missing_exchange.value.kind, missing_exchange.value.name) == ("exchange", "nope")
    assert store.view(namespace).bindings == frozenset()


async def test_deleting_a_queue_deletes_its_bindings(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    for name in ("q", "other"):
        await store.create_queue(namespace, Queue(name))
    await store.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT))
    kept = Binding("other", "x", "k")
    for binding in (Binding("q", "x", "k"), Binding("q", "amq.fanout", ""), kept):
        await store.add_binding(namespace, binding)
    assert await store.delete_queue(namespace, "q")
    assert store.view(namespace).bindings == {kept}
    # Re-created under the same name, the queue has no bindings (none came back).
    await store.create_queue(namespace, Queue("q"))
    other = await _opened(fleet, namespace)
    view = await wait_for(other, namespace, lambda v: "q" in v.queues)
    assert view.bindings == {kept}
    assert await store.add_binding(namespace, Binding("q", "x", "k"))


async def test_deleting_an_exchange_deletes_its_bindings_and_topic_keys(
    fleet: Fleet, namespace: str
) -> None:
    store = await _opened(fleet, namespace)
    await store.create_exchange(namespace, Exchange("t", ExchangeType.TOPIC))
    await store.create_queue(namespace, Queue("q"))
    await store.add_binding(namespace, Binding("q", "t", "a.*"))
    await store.add_binding(namespace, Binding("q", "amq.topic", "a.*"))
    await store.register_topic_key(namespace, "t", "a.b")
    await store.register_topic_key(namespace, "amq.topic", "a.b")
    assert await store.delete_exchange(namespace, "t")
    view = store.view(namespace)
    assert view.bindings == {Binding("q", "amq.topic", "a.*")}
    assert dict(view.topic_keys) == {"amq.topic": frozenset({"a.b"})}
    # Re-created, it starts empty.
    await store.create_exchange(namespace, Exchange("t", ExchangeType.TOPIC))
    assert await store.add_binding(namespace, Binding("q", "t", "a.*"))


async def test_topic_keys(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    assert await store.register_topic_key(namespace, "amq.topic", "a.b") is True
    assert await store.register_topic_key(namespace, "amq.topic", "a.b") is False
    assert await store.register_topic_key(namespace, "amq.topic", "a.c") is True
    assert await store.register_topic_key(namespace, "orders", "x") is True
    assert dict(store.view(namespace).topic_keys) == {
        "amq.topic": frozenset({"a.b", "a.c"}),
        "orders": frozenset({"x"}),
    }


async def test_versions_grow_and_changed_wakes(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
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
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
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
    writer = await _opened(fleet, namespace)
    for index in range(50):
        await writer.create_queue(namespace, Queue(f"q{index}"))
        await writer.add_binding(namespace, Binding(f"q{index}", "amq.direct", f"k{index}"))
    late = await fleet.replica()
    view = await late.open(namespace)  # complete when open returns: no waiting
    assert len(view.queues) == 50
    assert len(view.bindings) == 50


async def test_concurrent_creates_have_one_winner(fleet: Fleet, namespace: str) -> None:
    replicas = [await _opened(fleet, namespace) for _ in range(3)]
    results: dict[int, Queue] = {}
    candidates = [
        Queue("contested", durable=index % 2 == 0, arguments={"who": Field("b", index)})
        for index in range(len(replicas))
    ]

    async def declare(index: int) -> None:
        results[index] = await replicas[index].create_queue(namespace, candidates[index])

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for index in range(len(replicas)):
                nursery.start_soon(declare, index)
    winners = set(results.values())
    assert len(winners) == 1
    (winner,) = winners
    assert winner in candidates
    for replica in replicas:
        assert replica.view(namespace).queues["contested"] == winner


async def test_concurrent_binds_have_one_winner(fleet: Fleet, namespace: str) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
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
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
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
    late = await _opened(fleet, namespace)
    await late.create_queue(namespace, Queue("q"))
    assert late.view(namespace).bindings == frozenset()
    view = await wait_for(a, namespace, lambda v: "q" in v.queues)
    assert view.bindings == frozenset()


async def test_topic_keys_and_bindings_written_elsewhere_are_read_at_once(
    fleet: Fleet, namespace: str
) -> None:
    """The handshake of a pattern binding on one replica and a new key's first message on
    another (vhost.py): each reads the other's records straight after writing its own."""
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    await a.create_exchange(namespace, Exchange("events", ExchangeType.TOPIC))
    await a.create_exchange(namespace, Exchange("other", ExchangeType.TOPIC))
    for round_ in range(10):  # the watch may win now and then; the sync always finds it
        queue = f"q{round_}"
        await a.create_queue(namespace, Queue(queue))
        await a.add_binding(namespace, Binding(queue, "events", f"k{round_}.*"))
        assert (queue, f"k{round_}.*") in await b.sync_bindings_of(namespace, "events")
        await b.register_topic_key(namespace, "events", f"k{round_}.new")
        await b.register_topic_key(namespace, "other", f"k{round_}.new")
        keys = await a.sync_topic_keys(namespace, "events")
        assert f"k{round_}.new" in keys
        assert f"k{round_}.new" in a.view(namespace).topic_keys["events"]
    assert await a.sync_topic_keys(namespace, "events") == {f"k{n}.new" for n in range(10)}
    assert await b.sync_bindings_of(namespace, "other") == frozenset()
    assert await b.sync_topic_keys(namespace, "nope") == frozenset()
    assert await b.sync_bindings_of(namespace, "nope") == frozenset()


async def test_write_is_in_the_writers_view_when_it_returns(fleet: Fleet, namespace: str) -> None:
    store = await _opened(fleet, namespace)
    for index in range(20):
        name = f"q{index}"
        await store.create_queue(namespace, Queue(name))
        assert name in store.view(namespace).queues
        await store.add_binding(namespace, Binding(name, "amq.fanout", ""))
        assert Binding(name, "amq.fanout", "") in store.view(namespace).bindings
        assert await store.delete_queue(namespace, name)
        assert name not in store.view(namespace).queues


async def test_sync_finds_what_another_replica_wrote_before_the_watch_does(
    fleet: Fleet, namespace: str
) -> None:
    a = await _opened(fleet, namespace)
    b = await _opened(fleet, namespace)
    for round_ in range(10):  # the watch may win now and then; the sync always finds it
        queue = Queue(f"q{round_}", durable=True)
        exchange = Exchange(f"x{round_}", ExchangeType.FANOUT)
        await a.create_queue(namespace, queue)
        await a.create_exchange(namespace, exchange)
        assert await b.sync_queue(namespace, queue.name) == queue
        assert await b.sync_exchange(namespace, exchange.name) == exchange
        view = b.view(namespace)
        assert view.queues[queue.name] == queue and view.exchanges[exchange.name] == exchange
    assert await b.sync_queue(namespace, "nope") is None
    assert await b.sync_exchange(namespace, "nope") is None
    # And a deletion made elsewhere leaves the view at once.
    await a.delete_queue(namespace, "q0")
    assert await b.sync_queue(namespace, "q0") is None
    assert "q0" not in b.view(namespace).queues
