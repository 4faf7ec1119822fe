"""Priority queues as RabbitMQ defines them (``rabbit_priority_queue``, docs/priority.md).

- A classic queue declared with ``x-max-priority`` N (an integer, 0..255 once validated:
  ``rabbit_amqqueue:check_max_priority_arg``) has priorities 0..N; a value of another type
  makes no priority queue (``rabbit_priority_queue:priorities`` answers ``none``), although
  validation refuses such values first.
- A message without the ``priority`` property is priority 0; one above the maximum counts as
  the maximum (``rabbit_priority_queue:priority/2``).
- Among the queue's **ready** messages the highest priority goes first, first in first out
  within one priority: RabbitMQ keeps one backing queue per priority and fetches from the
  highest non-empty one. A requeued message goes back to its place in its own priority.
- The head of the queue is the message that would be delivered next: ``drop-head`` of a length
  limit drops that one (the oldest of the highest priority, as ``rabbit_priority_queue:drop``
  does), and expiry is checked from there.

:class:`PriorityBuffer` is that ordering, for the in-memory backend's queues and for what a
Pulsar consumer of a priority queue has read ahead (``gateway/pulsar/consumer.py``).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterator, Mapping
from typing import Final, Generic, TypeVar

from gateway.amqp.fieldtable import Field

__all__ = ["MAX_SUPPORTED_PRIORITY", "PriorityBuffer", "effective_priority", "max_priority"]

T = TypeVar("T")

# rabbit.hrl's MAX_SUPPORTED_PRIORITY: the message property is an octet.
MAX_SUPPORTED_PRIORITY: Final = 255
# rabbit_priority_queue:priorities/1 takes these integer types (not unsigned long, not
# float): the AMQP field kinds of long, short, signedint, byte, unsignedbyte, unsignedshort,
# unsignedint.
_INTEGER_KINDS: Final = frozenset("lsIbBui")


def max_priority(arguments: Mapping[str, Field]) -> int | None:
    """The highest priority of a queue with these (validated) arguments; None for a queue
    without priorities."""
    field = arguments.get("x-max-priority")
    if field is None or field.kind not in _INTEGER_KINDS:
        return None
    return max(0, min(int(field.value), MAX_SUPPORTED_PRIORITY))


def effective_priority(priority: int | None, maximum: int) -> int:
    """The priority a message with the ``priority`` property counts as in a queue whose
    highest priority is ``maximum``."""
    if priority is None or priority < 0:
        return 0
    return priority if priority <= maximum else maximum


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
