"""watcher.py on the real ZooKeeper: the first load, changes another client makes reaching the
mirror through watches (with their lag reported, the load's not), own writes applied at once,
and a closed namespace left alone."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
from kazoo.client import KazooClient

from gateway.metadata.codec import (
    binding_id,
    drain_child,
    encode_binding,
    encode_drain,
    encode_exchange,
    encode_queue,
)
from gateway.metadata.paths import Folder, encode_name
from gateway.metadata.store import DrainRecord, VhostView
from gateway.metadata.zookeeper.watcher import WatchedNamespace
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.unit.metadata.conftest import Parts, make_parts

pytestmark = pytest.mark.integration

DEADLINE = 20.0


@pytest.fixture
async def lagging(zk_hosts: str, zk_prefix: str) -> AsyncIterator[tuple[Parts, list[float]]]:
    lags: list[float] = []
    built = make_parts(zk_hosts, zk_prefix, lags)
    await built.session.connect()
    try:
        yield built, lags
    finally:
        with trio.CancelScope(shield=True):
            await built.session.aclose()


def _write_queue(raw: KazooClient, parts: Parts, namespace: str, queue: Queue) -> None:
    path = parts.layout.node(namespace, Folder.QUEUES, encode_name(queue.name))
    raw.create(path, encode_queue(queue), makepath=True)


async def _until(state: WatchedNamespace, predicate: Callable[[VhostView], bool]) -> VhostView:
    with trio.fail_after(DEADLINE):
        while not predicate(view := state.mirror.snapshot()):
            await state.event.wait()
    return view


async def _open(parts: Parts, namespace: str) -> WatchedNamespace:
    await parts.calls.ensure_paths(namespace, parts.layout.skeleton(namespace), "open")
    state = parts.watcher.start(namespace)
    with trio.fail_after(DEADLINE):
        await state.loaded.wait()
    return state


async def test_load_then_follow_another_clients_changes(
    lagging: tuple[Parts, list[float]], raw: KazooClient, namespace: str
) -> None:
    parts, lags = lagging
    await parts.calls.ensure_paths(namespace, parts.layout.skeleton(namespace), "open")
    _write_queue(raw, parts, namespace, Queue("before", durable=True))

    state = await _open(parts, namespace)
    assert state.mirror.snapshot().queues["before"].durable
    assert state.load_seconds is not None and state.load_seconds > 0
    assert lags == []  # what the first load reads is not lag
    assert parts.watcher.get(namespace) is state and len(parts.watcher) == 1

    _write_queue(raw, parts, namespace, Queue("after"))
    await _until(state, lambda view: "after" in view.queues)
    assert len(lags) == 1 and lags[0] >= 0

    raw.delete(parts.layout.node(namespace, Folder.QUEUES, encode_name("before")))
    view = await _until(state, lambda view: "before" not in view.queues)
    assert set(view.queues) == {"after"}


async def test_own_writes_are_in_the_view_at_once(parts: Parts, namespace: str) -> None:
    state = await _open(parts, namespace)
    version = state.mirror.version
    event = state.event
    parts.watcher.own(
        namespace, lambda mirror: mirror.own_created(Folder.QUEUES, "mine", Queue("mine"))
    )
    assert "mine" in state.mirror.snapshot().queues
    assert state.mirror.version > version and event.is_set()  # waiters woken
    parts.watcher.forget(namespace, Folder.QUEUES, "mine")
    assert "mine" not in state.mirror.snapshot().queues
    # Own writes to a namespace that is not open go nowhere.
    parts.watcher.own("other/ns", lambda mirror: pytest.fail("applied to no namespace"))


async def test_a_closed_namespace_is_no_longer_followed(parts: Parts, namespace: str) -> None:
    state = await _open(parts, namespace)
    event = state.event
    assert parts.watcher.live(state)
    parts.watcher.close(namespace)
    assert event.is_set()  # waiters wake up and find it gone
    assert not parts.watcher.live(state)
    assert parts.watcher.get(namespace) is None and parts.watcher.mirror(namespace) is None


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent-watch", "one-shot"])
async def test_changes_of_every_kind_reach_the_view(
    parts: Parts, raw: KazooClient, namespace: str, persistent: bool
) -> None:
    """Through the persistent watch, and through one-shot watches (a ZooKeeper before 3.6):
    a queue (read), a binding (its name says everything), a replacement, a data change and a
    created-and-deleted sentinel."""
    parts.watcher._persistent = persistent
    state = await _open(parts, namespace)
    _write_queue(raw, parts, namespace, Queue("q", exclusive=True, owner="c1"))
    exchange = parts.layout.node(namespace, Folder.EXCHANGES, "x")
    raw.create(exchange, encode_exchange(Exchange("x", ExchangeType.DIRECT)), makepath=True)
    binding = Binding("q", "x", "k")
    raw.create(
        parts.layout.node(namespace, Folder.BINDINGS, binding_id(binding)),
        encode_binding(binding),
        makepath=True,
    )
    await _until(state, lambda view: binding in view.bindings)
    # Replaced: deleted and created again with another owner, in one transaction.
    queue_path = parts.layout.node(namespace, Folder.QUEUES, "q")
    transaction = raw.transaction()
    transaction.delete(queue_path)
    transaction.create(queue_path, encode_queue(Queue("q", exclusive=True, owner="c2")))
    transaction.commit()
    await _until(state, lambda view: getattr(view.queues.get("q"), "owner", None) == "c2")
    # A drain record replaced in place (set_data), with the sentinel other writers add.
    drain = parts.layout.node(namespace, Folder.DRAINS, drain_child("q", "t"))
    raw.create(drain, encode_drain(DrainRecord((1, 1))), makepath=True)
    await _until(state, lambda view: view.drains.get(("q", "t")) == DrainRecord((1, 1)))
    transaction = raw.transaction()
    transaction.set_data(drain, encode_drain(DrainRecord((2, 2))))
    sentinel_path = parts.layout.node(namespace, Folder.DRAINS, "q,")
    transaction.create(sentinel_path)
    transaction.delete(sentinel_path)
    transaction.commit()
    await _until(state, lambda view: view.drains.get(("q", "t")) == DrainRecord((2, 2)))
    raw.delete(queue_path, recursive=True)
    await _until(state, lambda view: "q" not in view.queues and not view.bindings)
    assert parts.watcher._persistent is persistent


async def test_an_answer_is_applied_after_the_events_that_came_before_it(
    parts: Parts, raw: KazooClient, namespace: str
) -> None:
    """The events of a transaction and an answer read after it, handed to trio together: the
    events wait for their batch (``_flush``), queued behind the answer, but are applied before
    it. Applied after, the answer's new drain record was in the view beside the exchange the
    same transaction deleted (tests/integration/metadata/test_contract_drains.py, once)."""
    state = await _open(parts, namespace)
    exchange = parts.layout.node(namespace, Folder.EXCHANGES, "x")
    raw.create(exchange, encode_exchange(Exchange("x", ExchangeType.DIRECT)), makepath=True)
    child = drain_child("q", "t")
    drain = parts.layout.node(namespace, Folder.DRAINS, child)
    raw.create(drain, encode_drain(DrainRecord((1, 1))), makepath=True)
    await _until(state, lambda view: "x" in view.exchanges and ("q", "t") in view.drains)

    mirror = state.mirror
    exchange_there_at_drain_data: list[bool] = []
    apply_data = mirror.apply_data

    def recording(folder: Folder, *args: Any) -> bool:
        if folder is Folder.DRAINS:
            exchange_there_at_drain_data.append("x" in mirror.snapshot().exchanges)
        return apply_data(folder, *args)

    mirror.apply_data = recording  # type: ignore[method-assign]
    # Holding trio's thread, so that nothing handed to it runs: another client deletes the
    # exchange and rewrites the record in one transaction, then this store reads the record.
    # Its answer comes after the transaction's two events, and all three wait in one batch.
    transaction = raw.transaction()
    transaction.delete(exchange)
    transaction.set_data(drain, encode_drain(DrainRecord((2, 2))))
    transaction.commit()
    handed = parts.session._handed
    parts.watcher._read(state, Folder.DRAINS, [child])
    deadline = time.monotonic() + DEADLINE
    while len(handed) < 3:
        assert time.monotonic() < deadline, f"{len(handed)} of 3 calls handed to trio"
        time.sleep(0.001)  # the trio thread is held on purpose: nothing else may run

    view = await _until(state, lambda view: view.drains.get(("q", "t")) == DrainRecord((2, 2)))
    assert "x" not in view.exchanges
    assert exchange_there_at_drain_data and not any(exchange_there_at_drain_data)
