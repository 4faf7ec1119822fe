"""The Entities role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper
(a store per replica, each with its own session). Exchanges and queues: create if absent (one
winner of a race), delete with what hangs on them, exclusive owners that live as long as their
replica's session, and the synced reads that find another replica's write before the watch does."""

from __future__ import annotations

from decimal import Decimal

import pytest
import trio
import trio.testing

from gateway.amqp.fieldtable import Field
from gateway.metadata.errors import ConditionNotMet
from gateway.metadata.roles import Entities
from gateway.metadata.store import QueueCondition
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.integration.metadata.conftest import Fleet, opened, wait_for

ROLE = Entities  # test_contract_roles.py: every role has its contract

ARGUMENTS = {
    "x-max-length": Field("I", 10),
    "x-queue-type": Field("S", "classic"),
    "x-expires": Field("l", 60_000),
    "x-ratio": Field("D", Decimal("1.50")),
    "x-nested": Field("F", {"b": Field("u", 7), "a": Field("A", [Field("t", True)])}),
}

ODD_NAMES = ["a/b", "50%", "a,b", ".", "..", "ünï cødé ✓", " lead", "amq.gen-Xy_z:1@h#*"]


def _exclusive(name: str, connection: str = "conn-1") -> Queue:
    return Queue(name, exclusive=True, auto_delete=True, owner=connection)


async def test_exchange_create_get_delete(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
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
    store = await opened(fleet, namespace)
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
    store = await opened(fleet, namespace)
    first = Queue("q", durable=True)
    assert await store.create_queue(namespace, first) == first
    # A redeclare never modifies: the stored queue comes back, for the caller to compare.
    assert await store.create_queue(namespace, Queue("q", durable=False)) == first
    exchange = Exchange("x", ExchangeType.FANOUT)
    assert await store.create_exchange(namespace, exchange) == exchange
    assert await store.create_exchange(namespace, Exchange("x", ExchangeType.DIRECT)) == exchange
    assert store.view(namespace).queues["q"] == first


async def test_odd_names_round_trip(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
    for name in ODD_NAMES:
        await store.create_exchange(namespace, Exchange(name, ExchangeType.TOPIC))
        await store.create_queue(namespace, Queue(name))
        assert await store.add_binding(namespace, Binding(name, name, name))
        assert await store.register_topic_key(namespace, name, name)
    assert await store.add_binding(namespace, Binding(ODD_NAMES[0], "amq.direct", ""))
    assert await store.register_topic_key(namespace, "amq.topic", "")
    other = await opened(fleet, namespace)
    view = await wait_for(other, namespace, lambda v: len(v.bindings) == len(ODD_NAMES) + 1)
    assert set(ODD_NAMES) <= set(view.exchanges)
    assert set(ODD_NAMES) == set(view.queues)
    assert {Binding(n, n, n) for n in ODD_NAMES} | {Binding(ODD_NAMES[0], "amq.direct", "")} == (
        view.bindings
    )
    assert {n: frozenset({n}) for n in ODD_NAMES} | {"amq.topic": frozenset({""})} == dict(
        view.topic_keys
    )


async def test_concurrent_creates_have_one_winner(fleet: Fleet, namespace: str) -> None:
    replicas = [await opened(fleet, namespace) for _ in range(3)]
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


async def test_deleting_a_queue_deletes_its_bindings(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
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
    other = await opened(fleet, namespace)
    view = await wait_for(other, namespace, lambda v: "q" in v.queues)
    assert view.bindings == {kept}
    assert await store.add_binding(namespace, Binding("q", "x", "k"))


async def test_deleting_an_exchange_deletes_its_bindings_and_topic_keys(
    fleet: Fleet, namespace: str
) -> None:
    store = await opened(fleet, namespace)
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


async def test_an_exchange_if_unused_is_kept_while_it_has_a_binding(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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


async def test_an_exclusive_queue_is_owned_while_its_session_lasts(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_queue(namespace, _exclusive("reply"))
    assert await a.delete_queue(namespace, "reply")
    assert a.view(namespace).owned == frozenset()
    # No record is left behind to make the next declare (on any replica) fail.
    await wait_for(b, namespace, lambda v: "reply" not in v.queues)
    assert await b.create_queue(namespace, _exclusive("reply", "conn-9")) == _exclusive(
        "reply", "conn-9"
    )
    await wait_for(a, namespace, lambda v: v.owned == {"reply"})


async def test_sync_finds_what_another_replica_wrote_before_the_watch_does(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
