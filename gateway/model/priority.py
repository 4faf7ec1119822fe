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
Pulsar consumer of a priority queue has read ahead (``gateway/pulsar/consumer.py``). It
knows nothing of AMQP, so it lives in ``gateway/priority_buffer.py`` (the Pulsar layer does not
import the model); it is re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gateway.amqp.fieldtable import Field
from gateway.priority_buffer import PriorityBuffer

__all__ = ["MAX_SUPPORTED_PRIORITY", "PriorityBuffer", "effective_priority", "max_priority"]

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
