"""Consumers held per queue until closed (held_until_closed.py): dropped once closed, with
their queue's entry once empty; taken all at once by a queue's deletion, without a later
close dropping a newer entry of the queue."""

from __future__ import annotations

import trio
import trio.testing

from gateway.backend.pulsar.held_until_closed import HeldUntilClosed


class Consumer:
    def __init__(self) -> None:
        self.close_done = trio.Event()


async def test_a_consumer_is_held_until_it_is_closed() -> None:
    closed: list[Consumer] = []
    first, second = Consumer(), Consumer()
    async with trio.open_nursery() as nursery:
        held: HeldUntilClosed[Consumer] = HeldUntilClosed(nursery.start_soon, closed.append)
        held.hold("orders", first)
        held.hold("orders", second)
        assert set(held.of("orders")) == {first, second} and list(held) == ["orders"]
        first.close_done.set()
        await trio.testing.wait_all_tasks_blocked()
        assert held.of("orders") == [second] and closed == [first]
        second.close_done.set()
        await trio.testing.wait_all_tasks_blocked()
        assert held.of("orders") == [] and list(held) == [] and closed == [first, second]


async def test_taken_consumers_closing_later_leave_the_queues_new_ones_held() -> None:
    old, new = Consumer(), Consumer()
    async with trio.open_nursery() as nursery:
        held: HeldUntilClosed[Consumer] = HeldUntilClosed(nursery.start_soon)
        held.hold("orders", old)
        assert held.take("orders") == {old} and list(held) == []
        held.hold("orders", new)  # the queue declared again, a consumer of it cancelled
        old.close_done.set()
        await trio.testing.wait_all_tasks_blocked()
        assert held.of("orders") == [new]
        new.close_done.set()
    assert held.take("orders") == set()
