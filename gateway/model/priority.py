"""Priority queues as RabbitMQ defines them (``rabbit_priority_queue``, docs/priority.md).

- A classic queue declared with ``x-max-priority`` N (an integer, 0..255 once validated:
  ``rabbit_amqqueue:check_max_priority_arg``) has priorities 0..N; a value of another type
  makes no priority queue (``rabbit_priority_queue:priorities`` answers ``none``), although
  validation refuses such values first.
- A message without the ``priority`` property is priority 0; one above the maximum counts as
  the maximum (``rabbit_priority_queue:priority/2``).
- Among the queue's **ready** messages the highest priority goes first, first in first out
  within one priority: RabbitMQ keeps one backing queue per priority and fetches from the
  highest non-empty one. A requeued message goes back to the front of its own priority.
- The head of the queue is the message that would be delivered next: ``drop-head`` of a length
  limit drops that one (the oldest of the highest priority, as ``rabbit_priority_queue:drop``
  does), and expiry is checked from there.

:class:`PriorityBuffer` is that ordering, for the in-memory backend's queues and for what a
Pulsar consumer of a priority queue has read ahead (``gateway/pulsar/consumer.py``).
"""

from __future__ import annotations

import bisect
from collections import deque
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
    """Items ordered for delivery: highest priority first, first in first out within a
    priority; ``push_front`` puts one back at the front of its priority (a requeue).

    One FIFO per priority in use and the sorted list of those priorities: ``push`` and ``pop``
    cost O(1) plus a bisect over at most 256 priorities.
    """

    __slots__ = ("_active", "_by_priority", "_size")

    def __init__(self) -> None:
        self._by_priority: dict[int, deque[T]] = {}
        self._active: list[int] = []  # the priorities that hold items, ascending
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def _fifo(self, priority: int) -> deque[T]:
        fifo = self._by_priority.get(priority)
        if fifo is None:
            fifo = self._by_priority[priority] = deque()
            bisect.insort(self._active, priority)
        return fifo

    def push(self, item: T, priority: int) -> None:
        """``item`` arrives: behind everything of its priority."""
        self._fifo(priority).append(item)
        self._size += 1

    def push_front(self, item: T, priority: int) -> None:
        """``item`` comes back (requeued): ahead of everything of its priority."""
        self._fifo(priority).appendleft(item)
        self._size += 1

    def peek(self) -> T:
        """The next item ``pop`` would return; IndexError when empty."""
        if not self._active:
            raise IndexError("peek from an empty PriorityBuffer")
        return self._by_priority[self._active[-1]][0]

    def pop(self) -> T:
        """The next item: the oldest of the highest priority. IndexError when empty."""
        if not self._active:
            raise IndexError("pop from an empty PriorityBuffer")
        priority = self._active[-1]
        fifo = self._by_priority[priority]
        item = fifo.popleft()
        if not fifo:
            del self._by_priority[priority]
            self._active.pop()
        self._size -= 1
        return item

    def __iter__(self) -> Iterator[T]:
        """Every item, in the order ``pop`` would return them."""
        for priority in reversed(self._active):
            yield from self._by_priority[priority]

    def keep(self, wanted: Callable[[T], bool]) -> list[T]:
        """Remove the items ``wanted`` refuses, keeping the others' order; returns the
        removed ones in delivery order."""
        removed: list[T] = []
        for priority in list(reversed(self._active)):
            fifo = self._by_priority[priority]
            kept: deque[T] = deque()
            for item in fifo:
                (kept if wanted(item) else removed).append(item)
            if kept:
                self._by_priority[priority] = kept
            else:
                del self._by_priority[priority]
                self._active.remove(priority)
        self._size -= len(removed)
        return removed

    def clear(self) -> None:
        self._by_priority.clear()
        self._active.clear()
        self._size = 0
