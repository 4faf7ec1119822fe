"""What only the memory store has (the shared contract is in tests/integration/metadata)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import MetadataUnavailable
from gateway.model.entities import Binding, Queue


async def test_unavailable_refuses_writes_and_keeps_views() -> None:
    store = MemoryMetadataStore()
    await store.open("t/n")
    await store.create_queue("t/n", Queue("q"))
    view = store.view("t/n")
    store.available = False
    with pytest.raises(MetadataUnavailable, match="unavailable"):
        await store.create_queue("t/n", Queue("other"))
    with pytest.raises(MetadataUnavailable):
        await store.add_binding("t/n", Binding("q", "amq.direct", "k"))
    with pytest.raises(MetadataUnavailable):
        await store.open("t/other")
    assert store.view("t/n") == view
    store.available = True
    await store.create_queue("t/n", Queue("other"))
    assert set(store.view("t/n").queues) == {"q", "other"}


async def test_namespaces_are_separate() -> None:
    store = MemoryMetadataStore()
    await store.open("t/a")
    await store.open("t/b")
    await store.create_queue("t/a", Queue("q"))
    assert "q" not in store.view("t/b").queues


async def test_changed_can_be_cancelled() -> None:
    store = MemoryMetadataStore()
    view = await store.open("t/n")
    with trio.move_on_after(0.1) as scope:
        await store.changed("t/n", view.version)
    assert scope.cancelled_caught


async def test_all_waiters_wake() -> None:
    store = MemoryMetadataStore()
    view = await store.open("t/n")
    woken: list[int] = []

    async def waiter() -> None:
        woken.append((await store.changed("t/n", view.version)).version)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            await store.register_topic_key("t/n", "amq.topic", "k")
    assert len(woken) == 3 and min(woken) > view.version
