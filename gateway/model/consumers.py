"""Which of a queue's consumers gets its messages: consumer priorities and single active consumer.

RabbitMQ's rules (4.x, checked against ``rabbit_queue_consumers``, ``rabbit_amqqueue_process``
and ``rabbit_fifo``; the docs' "Consumer Priorities" and "Consumers" → "Single Active
Consumer"):

- **Consumer priority** (``x-priority`` on Basic.Consume, any AMQP integer type, default 0,
  negative allowed): a message goes to the highest-priority consumer that is not blocked (its
  prefetch is full), round-robin among equals; lower priorities get messages only while every
  higher one is blocked.
- **Single active consumer** (``x-single-active-consumer: true`` on Queue.Declare, classic and
  quorum queues): every consumer is registered (Consume-Ok), but only one, the *active* one,
  gets messages, even while its prefetch is full. The first consumer registered becomes
  active; when it is cancelled or its channel or connection goes, the queue picks the next:

  - classic queues (``rabbit_queue_consumers:get_consumer``): the highest priority, then the
    earliest registered. A consumer that registers later never takes over from an active one,
    whatever its priority.
  - quorum queues (``rabbit_fifo``, RabbitMQ 4.0+): waiting consumers are ordered by priority,
    then by credit (the consumer's prefetch; none is 2,000), then registration order. A waiting
    consumer of *higher priority* than the active one takes over: the active one gets no new
    message (``quiescing``) and, once its unacknowledged messages are all settled, goes back to
    waiting while the other becomes active.

  Exclusive consumers are refused on a classic SAC queue (403 "in exclusive use") and ignored
  by quorum queues; Basic.Get is refused on a quorum SAC queue (405) and allowed on a classic
  one.

:class:`LinePlace` is one consumer of a SAC queue as every replica sees it (the metadata store
keeps them fleet-wide, gateway/metadata); :func:`successor` and :func:`preempting` are the two
decisions above.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field

__all__ = [
    "UNLIMITED_CREDIT",
    "LinePlace",
    "Standing",
    "consumer_credit",
    "consumer_priority",
    "preempting",
    "refuse_exclusive",
    "refuse_get",
    "refuse_priority",
    "single_active",
    "successor",
]

# rabbit_fifo_client's UNLIMITED_PREFETCH_COUNT: the credit of a quorum queue's consumer
# without a prefetch limit.
UNLIMITED_CREDIT: Final = 2000
# rabbit_amqqueue's INTEGER_ARG_TYPES: the kinds x-priority may have once validated.
_INTEGER_KINDS: Final = frozenset("bsIlBui")


def single_active(arguments: Mapping[str, Field]) -> bool:
    """Whether a queue with these (validated) arguments has a single active consumer
    (``rabbit_amqqueue_process:init_state``: exactly ``{bool, true}``)."""
    field = arguments.get("x-single-active-consumer")
    return field is not None and field.kind == "t" and field.value is True


def consumer_priority(arguments: Mapping[str, Field]) -> int:
    """A consumer's priority from its (validated) Basic.Consume arguments; 0 without one."""
    field = arguments.get("x-priority")
    if field is None or field.kind not in _INTEGER_KINDS:
        return 0
    return int(field.value)


def consumer_credit(prefetch: int) -> int:
    """The credit a quorum queue orders waiting consumers by: the consumer's prefetch
    (Basic.Qos ``global=false``), or UNLIMITED_CREDIT without one."""
    return prefetch if prefetch > 0 else UNLIMITED_CREDIT


@dataclass(frozen=True, slots=True)
class Standing:
    """What orders a consumer of a single-active-consumer queue among the others, besides
    when it registered: its priority and (on quorum queues) its credit."""

    priority: int = 0
    credit: int = UNLIMITED_CREDIT


@dataclass(frozen=True, slots=True)
class LinePlace:
    """One consumer of a single-active-consumer queue: ``consumer`` its registration's id,
    ``replica`` the gateway replica it is connected to, ``sequence`` its place in registration
    order (increasing), ``active`` whether it is the one getting the messages."""

    consumer: str
    replica: str
    sequence: int
    priority: int = 0
    credit: int = UNLIMITED_CREDIT
    active: bool = False


def successor(places: Iterable[LinePlace], queue_type: str) -> LinePlace | None:
    """The consumer that becomes active when none is (None: nobody waits, or one is active)."""
    waiting = []
    for place in places:
        if place.active:
            return None
        waiting.append(place)
    if not waiting:
        return None
    if queue_type == "quorum":
        return min(waiting, key=lambda p: (-p.priority, -p.credit, p.sequence))
    return min(waiting, key=lambda p: (-p.priority, p.sequence))


def preempting(places: Iterable[LinePlace], queue_type: str) -> LinePlace | None:
    """On a quorum queue, the waiting consumer of higher priority than the active one, for
    which the active one must step down once its deliveries are settled; None otherwise (and
    always on a classic queue, where a later consumer never takes over)."""
    if queue_type != "quorum":
        return None
    listed = list(places)
    active = next((p for p in listed if p.active), None)
    if active is None:
        return None
    waiting = [p for p in listed if not p.active and p.priority > active.priority]
    if not waiting:
        return None
    return min(waiting, key=lambda p: (-p.priority, -p.credit, p.sequence))


def refuse_exclusive(where: str) -> ChannelError:
    """An exclusive consumer on a classic SAC queue (``rabbit_amqqueue_process``
    ``basic_consume`` answers ``exclusive_consume_unavailable`` whether or not the queue has
    consumers; ``rabbit_classic_queue`` words it)."""
    return ChannelError(ReplyCode.ACCESS_REFUSED, f"{where} in exclusive use")


def refuse_priority(where: str, why: str) -> ChannelError:
    """``x-priority`` where the backend cannot honour it (rabbit_amqqueue's wording for an
    invalid argument, with the reason)."""
    return ChannelError(
        ReplyCode.PRECONDITION_FAILED,
        f"invalid arg 'x-priority' for {where}: not implemented by Starlight for RabbitMQ "
        f"with this pulsar-client ({why})",
    )


def refuse_get(where: str) -> ChannelError:
    """Basic.Get on a quorum SAC queue (``rabbit_fifo`` refuses a dequeue; the text is
    ``rabbit_channel:unsupported_single_active_consumer_error``, whose ``~p`` prints the
    type's name as an Erlang binary)."""
    return ChannelError(
        ReplyCode.RESOURCE_LOCKED,
        f"cannot obtain access to locked {where}. basic.get operations are not supported by "
        '<<"quorum">> queues with single active consumer',
    )
