"""A producer's in-flight slots: trio's ``Semaphore``, given back a group at a time.

A grouped send (producer.py) completes up to ``GROUP_MAX_MESSAGES`` messages at once, and
``trio.Semaphore.release`` gives back one slot per call (with its parking lot's check, two
Python calls per message, and two more to take one). The rules are the semaphore's: a slot
given back goes to the task that has waited longest first, and ``free`` is never above zero
while a task waits.
"""

from __future__ import annotations

import trio

__all__ = ["InFlightSlots"]


class InFlightSlots:
    __slots__ = ("_waiting", "free")

    def __init__(self, total: int) -> None:
        self.free = total
        self._waiting = trio.lowlevel.ParkingLot()

    def take_nowait(self) -> bool:
        """Take a slot if one is free; False (nothing taken) if none is."""
        if self.free:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting for one if none is free. Always a checkpoint, as
        ``trio.Semaphore.acquire``; cancelled while waiting, it takes nothing."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.take_nowait():
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        await self._waiting.park()  # woken by ``give_back``, with its slot

    def give_back(self, count: int = 1) -> None:
        """``count`` slots are free again: to the waiting tasks first, in their order."""
        waiting = self._waiting
        handed = len(waiting.unpark(count=count)) if waiting else 0
        self.free += count - handed
