"""The Drains role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper (a
store per replica, each with its own session). Drain records: written in one transaction with
the unbind, the rebind or the delete that makes them, and changed only at the version read."""

from __future__ import annotations

from gateway.metadata.roles import Drains
from gateway.metadata.store import REMOVE, DrainRecord, VhostView
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.integration.metadata.conftest import Fleet, opened, wait_for

ROLE = Drains  # test_contract_roles.py: every role has its contract


async def test_drain_records_are_written_with_the_unbind_and_the_rebind(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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


async def test_deleting_an_exchange_writes_the_drains_of_its_bindings(
    fleet: Fleet, namespace: str
) -> None:
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
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
    # The records, the bindings and the exchange go in one transaction: the other replica
    # never shows the new records beside the exchange or its bindings (it once did, when an
    # answer was applied before the events that came ahead of it: test_watcher.py).

    def all_of_it(view: VhostView) -> bool:
        if view.drains != drains:
            return False
        assert "x" not in view.exchanges and not view.bindings
        return True

    await wait_for(b, namespace, all_of_it)
