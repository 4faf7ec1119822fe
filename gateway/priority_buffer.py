"""Items ordered for delivery by priority, then by their place in line (RabbitMQ's priority
queue order: ``gateway/model/priority.py`` says which priority a message has).

Standard library only: the in-memory backend's queues and a Pulsar consumer of a priority
queue (``gateway/pulsar/consumer.py``) both order with it.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["PriorityBuffer"]

T = TypeVar("T")


class PriorityBuffer(Generic[T]):
    """Items ordered for delivery: highest priority first, then by their place in line.

    ``push`` puts an item at the back of its priority and returns its place; ``pop_entry``
    returns the place with the item, and ``restore`` puts an item back at that place: a
    requeued message goes back where it was, ahead of what arrived after it, and several
    requeued in any order come back in their first order (RabbitMQ's requeue). One heap per
    priority in use, keyed by place, and the sorted list of those priorities: O(log n) per
    operation plus a bisect over at most 256 priorities.
    """

    __slots__ = ("_active", "_by_priority", "_front", "_next", "_size", "_ties")

    def __init__(self) -> None:
        # priority -> heap of (place, tiebreak, item); the tiebreak keeps items uncompared.
        self._by_priority: dict[int, list[tuple[int, int, T]]] = {}
        self._active: list[int] = []  # the priorities that hold items, ascending
        self._next = 0  # the next place at the back
        self._front = -1  # the next place at the front
        self._ties = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def restore(self, item: T, priority: int, place: int) -> None:
        """Put ``item`` (back) at ``place`` in its priority's line."""
        heap = self._by_priority.get(priority)
        if heap is None:
            heap = self._by_priority[priority] = []
            bisect.insort(self._active, priority)
        self._ties += 1
        heapq.heappush(heap, (place, self._ties, item))
        self._size += 1

    def push(self, item: T, priority: int) -> int:
        """``item`` arrives: behind everything of its priority. Returns its place."""
        place = self._next
        self._next += 1
        self.restore(item, priority, place)
        return place

    def push_front(self, item: T, priority: int) -> int:
        """``item`` goes ahead of everything of its priority. Returns its place."""
        place = self._front
        self._front -= 1
        self.restore(item, priority, place)
        return place

    def peek(self) -> T:
        """The next item ``pop`` would return; IndexError when empty."""
        if not self._active:
            raise IndexError("peek from an empty PriorityBuffer")
        return self._by_priority[self._active[-1]][0][2]

    def pop_entry(self) -> tuple[int, T]:
        """The next item and its place: the first in line of the highest priority.
        IndexError when empty."""
        if not self._active:
            raise IndexError("pop from an empty PriorityBuffer")
        priority = self._active[-1]
        heap = self._by_priority[priority]
        place, _tiebreak, item = heapq.heappop(heap)
        if not heap:
            del self._by_priority[priority]
            self._active.pop()
        self._size -= 1
        return place, item

    def pop(self) -> T:
        """The next item: the first in line of the highest priority. IndexError when empty."""
        return self.pop_entry()[1]

    def __iter__(self) -> Iterator[T]:
        """Every item, in the order ``pop`` would return them."""
        for priority in reversed(self._active):
            for _place, _tiebreak, item in sorted(self._by_priority[priority]):
                yield item

    def keep(self, wanted: Callable[[T], bool]) -> list[T]:
        """Remove the items ``wanted`` refuses, keeping the others' places; returns the
        removed ones in delivery order."""
        removed: list[T] = []
        for priority in list(reversed(self._active)):
            kept: list[tuple[int, int, T]] = []
            for entry in sorted(self._by_priority[priority]):
                if wanted(entry[2]):
                    kept.append(entry)
                else:
                    removed.append(entry[2])
            if kept:
                self._by_priority[priority] = kept  # sorted: a valid heap
            else:
                del self._by_priority[priority]
                self._active.remove(priority)
        self._size -= len(removed)
        return removed

    def clear(self) -> None:
        self._by_priority.clear()
        self._active.clear()
        self._size = 0
