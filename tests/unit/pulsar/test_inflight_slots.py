"""InFlightSlots: trio's Semaphore rules, with slots given back a group at a time."""

from __future__ import annotations

import trio
import trio.testing

from gateway.pulsar.inflight_slots import InFlightSlots


def test_takes_until_none_is_free() -> None:
    slots = InFlightSlots(2)
    assert slots.take_nowait()
    assert slots.take_nowait()
    assert not slots.take_nowait()
    assert slots.free == 0
    slots.give_back(2)
    assert slots.free == 2


async def test_slots_given_back_go_to_the_waiting_tasks_first_in_their_order() -> None:
    slots = InFlightSlots(1)
    assert slots.take_nowait()
    got: list[int] = []

    async def waiter(number: int) -> None:
        await slots.take()
        got.append(number)

    async with trio.open_nursery() as nursery:
        for number in range(3):
            nursery.start_soon(waiter, number)
            await trio.testing.wait_all_tasks_blocked()
        slots.give_back()
        await trio.testing.wait_all_tasks_blocked()
        assert got == [0]
        slots.give_back(1)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [0, 1]
        assert slots.free == 0
        assert not slots.take_nowait()  # the third still waits: nothing to take past it
        slots.give_back(3)  # one to the third, two free
        await trio.testing.wait_all_tasks_blocked()
    assert got == [0, 1, 2]
    assert slots.free == 2


async def test_a_cancelled_wait_takes_nothing() -> None:
    slots = InFlightSlots(1)
    assert slots.take_nowait()
    with trio.move_on_after(0.01):
        await slots.take()
    slots.give_back()
    assert slots.free == 1


async def test_take_is_a_checkpoint_even_with_a_slot_free() -> None:
    slots = InFlightSlots(1)
    with trio.CancelScope() as scope:
        scope.cancel()
        await slots.take()
    assert slots.free == 1  # cancelled before it took one
