"""How often other trio tasks ran while one awaited call was in progress: whether a long
walk yields, or holds the trio thread (and every client of the process) until it is done."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import trio

T = TypeVar("T")


async def turns_during(call: Awaitable[T]) -> tuple[T, int]:
    """``call``'s result, and how many times a task looping on checkpoints ran meanwhile."""
    turns = 0
    done = False

    async def other_task() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_task)
        await trio.lowlevel.checkpoint()  # the other task is running
        turns = 0
        result = await call
        done = True
    return result, turns
