"""BasicGetConsumers: a polling client's getter is swapped for one that reads ahead more
(basic_get.py, issue 34), and never while a Get of it is held or another Get is under way."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

import trio

from gateway.backend.pulsar.basic_get import (
    GET_HOT_READ_AHEAD,
    GET_READ_AHEAD,
    HOT_AFTER,
    BasicGetConsumers,
)
from gateway.backend.pulsar.delivery import PulsarQueueSubscription


class FakeConsumer:
    buffered = 0


class FakeGetter:
    """The part of PulsarQueueSubscription that BasicGetConsumers uses."""

    def __init__(self, read_ahead: int, opened: list[FakeGetter]) -> None:
        self.read_ahead = read_ahead
        self.closed = False
        self.outstanding = 0
        self.consumer = FakeConsumer()
        self.close_done = trio.Event()
        self.handed_back: bool | None = None
        opened.append(self)

    async def filled(self) -> None:
        pass

    def receive_nowait(self) -> Any:
        return object()  # a message ready: Get-Ok

    async def receive(self) -> Any:
        return object()

    async def close(self) -> None:
        self.closed = True
        self.close_done.set()

    def retire(
        self, spawn: Callable[[Callable[[], Awaitable[None]]], None], *, hand_back: bool = True
    ) -> None:
        self.handed_back = hand_back
        spawn(self.close)


async def _getters(
    nursery: trio.Nursery, while_hot_opens: Callable[[], Awaitable[None]] | None = None
) -> tuple[BasicGetConsumers, list[FakeGetter]]:
    opened: list[FakeGetter] = []

    async def open_consumer(queue: str, read_ahead: int) -> PulsarQueueSubscription:
        await trio.lowlevel.checkpoint()  # a subscribe is a round trip
        if read_ahead == GET_HOT_READ_AHEAD and while_hot_opens is not None:
            await while_hot_opens()
        return cast(PulsarQueueSubscription, FakeGetter(read_ahead, opened))

    async def count_ready(queue: str) -> int:
        return 100

    gets = BasicGetConsumers(lambda task: nursery.start_soon(task), open_consumer, count_ready)
    return gets, opened


async def test_a_polling_client_gets_a_hot_getter_after_a_run_of_settled_gets() -> None:
    async with trio.open_nursery() as nursery:
        gets, opened = await _getters(nursery)
        for _ in range(HOT_AFTER):  # the first opens the getter, then HOT_AFTER - 1 counted
            assert await gets.get("q", _nothing) is not None
        assert [g.read_ahead for g in opened] == [GET_READ_AHEAD]
        assert await gets.get("q", _nothing) is not None
        # The cold getter closed before the hot one opened (what it read goes back in line).
        assert [g.read_ahead for g in opened] == [GET_READ_AHEAD, GET_HOT_READ_AHEAD]
        assert opened[0].closed and not opened[1].closed
        assert gets.by_queue["q"] is cast(PulsarQueueSubscription, opened[1])
        # Retired with nothing outstanding: closed with its read-ahead (not handed back)
        # before close returns, so before a new consumer subscribes.
        await gets.close("q")
        assert opened[1].closed and opened[1].handed_back is None
        nursery.cancel_scope.cancel()


async def test_a_getter_with_nothing_held_is_closed_before_a_consumer_subscribes() -> None:
    # Not handed back by negative acknowledgements, which return each topic's share at its
    # own timer's tick while the new consumer reads: a priority queue's consumer got a lower
    # priority first (the Java client's priority scenario: get, then consume with prefetch 1).
    async with trio.open_nursery() as nursery:
        gets, opened = await _getters(nursery)
        await gets.get("q", _nothing)
        await gets.close("q")
        assert opened[0].closed and opened[0].handed_back is None
        nursery.cancel_scope.cancel()


async def test_a_held_get_restarts_the_run() -> None:
    async with trio.open_nursery() as nursery:
        gets, opened = await _getters(nursery)
        for _ in range(HOT_AFTER - 1):
            await gets.get("q", _nothing)
        opened[0].outstanding = 1  # the client holds the last one unsettled
        for _ in range(HOT_AFTER - 1):
            await gets.get("q", _nothing)
        opened[0].outstanding = 0
        for _ in range(HOT_AFTER - 1):
            await gets.get("q", _nothing)
        assert [g.read_ahead for g in opened] == [GET_READ_AHEAD]
        # A cold getter retired with a Get held hands back what it read ahead, as before.
        opened[0].outstanding = 1
        await gets.close("q")
        assert opened[0].handed_back is True
        nursery.cancel_scope.cancel()


async def test_a_consume_during_the_swap_leaves_the_hot_getter_unused() -> None:
    async with trio.open_nursery() as nursery:
        gets: BasicGetConsumers | None = None

        async def consume_meanwhile() -> None:
            assert gets is not None
            await gets.close("q")  # Basic.Consume retires the getter while the swap runs

        gets, opened = await _getters(nursery, consume_meanwhile)
        for _ in range(HOT_AFTER):
            await gets.get("q", _nothing)
        await gets.get("q", _nothing)
        hot = [g for g in opened if g.read_ahead == GET_HOT_READ_AHEAD]
        assert len(hot) == 1 and hot[0].closed and not gets.hot
        # The Get itself was answered, by a cold getter opened afresh.
        assert [g.read_ahead for g in opened] == [GET_READ_AHEAD, GET_HOT_READ_AHEAD, 1]
        assert gets.by_queue["q"] is cast(PulsarQueueSubscription, opened[2])
        nursery.cancel_scope.cancel()


async def _nothing() -> None:
    pass
