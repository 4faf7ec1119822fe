"""The values the metadata store's roles take and return (roles.py): the view of a namespace,
the drain records of subscriptions no binding needs, the conditions of a queue delete, and the
error of a store that cannot be written. Pure data: no I/O, nothing of ZooKeeper."""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.model.consumers import LinePlace
from gateway.model.entities import Binding, Exchange, ExchangeBinding, Queue
from gateway.model.graph import RouteSnapshot

# A message's place in a topic: (ledger, entry). Every message of one entry (a batch) was
# written at the same moment, so entries are what unbinds and rebinds are compared by.
Position = tuple[int, int]


class MetadataUnavailable(Exception):
    """The store cannot be written (e.g. ZooKeeper is unreachable): a metadata change must be
    refused with a clear error; publishing and consuming go on from the view."""


@dataclass(frozen=True, slots=True)
class DrainRecord:
    """A queue's subscription on a topic that none of its bindings needs any more.

    While ``end`` is set it *drains*: the queue's consumers (on every replica) keep reading
    the topic, and drop messages past ``end`` (written after the unbind) up to ``resumed``
    (the topic's last entry when the queue was bound again, if it was). With ``end`` None the
    subscription is to be *removed*: nobody reads it any more and the namespace's leader
    deletes it from Pulsar (after a queue delete, or once a drain has finished).

    ``via``: when the queue's consumers judge each message of the topic (a headers binding,
    or exchange bindings on the way, model/graph.py), the bindings that routed what came
    before each change of them: ``(until, bindings)`` pairs in order, a message up to
    ``until`` (and past the pairs before) judged by ``bindings``, a later one by the bindings
    of now. A record whose ``resumed`` equals ``end`` excludes nothing: the topic stays bound,
    only some of the bindings that routed into it went (``via`` keeps them)."""

    end: Position | None = None
    resumed: Position | None = None
    via: tuple[tuple[Position, RouteSnapshot], ...] = ()

    @property
    def removing(self) -> bool:
        return self.end is None

    def judged_by(self, position: Position) -> RouteSnapshot | None:
        """The bindings that routed a message at ``position`` (None: the current ones)."""
        for until, snapshot in self.via:
            if position <= until:
                return snapshot
        return None

    def excludes(self, position: Position) -> bool:
        """Whether a message at ``position`` was written while the queue was not bound."""
        end = self.end
        if end is None:
            return False
        return position > end and (self.resumed is None or position <= self.resumed)


def by_queue(
    queue: str, drains: Mapping[str, DrainRecord] | None
) -> dict[tuple[str, str], DrainRecord]:
    """A queue binding's drain records (by topic) keyed as the store keeps them: (queue, topic)."""
    return {(queue, topic): record for topic, record in (drains or {}).items()}


REMOVE = DrainRecord()


class QueueCondition(enum.Enum):
    """What a conditional queue delete checks, atomically with the delete."""

    # No consumer is registered on any replica (Queue.Delete if-unused).
    UNUSED = "unused"
    # Auto-delete, has had a consumer, has none now on any replica (its last one went).
    ABANDONED = "abandoned"
    # Exclusive, and its owner's record is gone (the owner's replica died).
    ORPHANED = "orphaned"


def _frozen_empty() -> Mapping[str, Exchange]:
    return MappingProxyType({})


@dataclass(frozen=True)
class VhostView:
    """An immutable snapshot of one namespace's metadata. ``version`` grows with every change
    the view has seen, so a caller can tell whether something it derived is stale."""

    version: int = 0
    exchanges: Mapping[str, Exchange] = field(default_factory=_frozen_empty)
    queues: Mapping[str, Queue] = field(default_factory=lambda: MappingProxyType({}))
    bindings: Set[Binding] = frozenset()
    # The bindings of each queue (queues without any are absent): what a queue's topics,
    # its delete and its statistics need, without a walk over every binding. One binding is
    # kept in a tuple, several in a frozenset (mirror.bound: a million queues with one each).
    queue_bindings: Mapping[str, Collection[Binding]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Exchange-to-exchange bindings (a binding is here while both its exchanges are).
    exchange_bindings: frozenset[ExchangeBinding] = frozenset()
    # For topic exchanges: the routing keys that have a topic (a key is registered before
    # the first message is published with it, so a later binding finds its topic).
    topic_keys: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    # Exclusive queues whose owner is alive (its replica's session holds the owner record).
    owned: frozenset[str] = frozenset()
    # Consumers of each queue on every replica (queues without any are absent).
    consumers: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # (queue, topic) -> the record of a subscription no binding needs (see DrainRecord).
    drains: Mapping[tuple[str, str], DrainRecord] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # The consumers of each single-active-consumer queue on every replica, in registration
    # order (queues without any are absent; model/consumers.py).
    lines: Mapping[str, tuple[LinePlace, ...]] = field(default_factory=lambda: MappingProxyType({}))


# Chooses, from a single-active-consumer queue's consumers as the store has them now (in
# registration order, none active), the one to make active; None: none of them.
PickActive = Callable[[Sequence[LinePlace]], LinePlace | None]


@dataclass(frozen=True)
class ExchangeEdges:
    """An exchange's bindings as the store has them now, names and keys only (arguments are
    left out): to queues (queue, key), to exchanges it is the source of (destination, key),
    and from exchanges it is the destination of (source, key)."""

    queues: frozenset[tuple[str, str]] = frozenset()
    outgoing: frozenset[tuple[str, str]] = frozenset()
    incoming: frozenset[tuple[str, str]] = frozenset()
