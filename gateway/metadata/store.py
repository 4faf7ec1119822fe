"""The metadata store: where every replica finds the vhosts' exchanges, queues and bindings.

Reads come from a local view that watches keep current, so routing a message costs no
round trip; writes go to the store and are compare-and-set, so two replicas declaring the
same name at once end with one winner that both see. A replica's view always includes its
own completed writes (it never answers from a view older than its last write).

Some records live only as long as the replica that wrote them (its *session*, in ZooKeeper
terms): the owner of an exclusive queue and the consumers of a queue. When a replica dies its
session ends and they go with it; the leader of the namespace (one replica, elected through
the store) then deletes what they kept alive (docs/metadata.md, "Lifetimes").
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from gateway.model.consumers import LinePlace, Standing
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


class MetadataStore(Protocol):
    """Per-namespace metadata (``namespace`` is ``tenant/ns``: a vhost's Pulsar namespace)."""

    @property
    def replica_id(self) -> str:
        """This replica's identity in the store (unique across the fleet and restarts)."""
        ...

    async def open(self, namespace: str) -> VhostView:
        """Load the namespace (once) and keep its view current; returns the view."""
        ...

    def view(self, namespace: str) -> VhostView:
        """The current view of an opened namespace."""
        ...

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        """Wait until the view's version is above ``since_version``; return it."""
        ...

    async def sync_queue(self, namespace: str, name: str) -> Queue | None:
        """The queue as ZooKeeper has it now, after a sync (None: not there); the view is
        brought up to date with it. For a name the view lacks: a queue declared on another
        replica a moment ago is found before the watch tells this one."""
        ...

    async def sync_exchange(self, namespace: str, name: str) -> Exchange | None:
        """Likewise for an exchange."""
        ...

    async def sync_topic_keys(self, namespace: str, exchange: str) -> frozenset[str]:
        """The routing keys with a topic of ``exchange``, as ZooKeeper has them now (after a
        sync), including those registered by other replicas that this one's watches have
        not reported yet; the view learns them.

        With ``sync_bindings_of`` this closes the race of a pattern binding on one replica
        and the first message of a new key on another: each reads the other's kind of
        record after writing its own, so whichever write comes second sees the first."""
        ...

    async def sync_bindings_of(self, namespace: str, exchange: str) -> frozenset[tuple[str, str]]:
        """The (queue, routing key) of every binding of ``exchange``, as ZooKeeper has them
        now (after a sync). Arguments are left out: it is for topic exchanges."""
        ...

    async def sync_edges_of(self, namespace: str, exchange: str) -> ExchangeEdges:
        """Every binding ``exchange`` is an end of (to queues, and to or from exchanges), as
        the store has them now (after a sync): what routing through exchange bindings reads
        when the view may lag another replica's bind (one listing: the exchange's node)."""
        ...

    async def sync_has_exchange_bindings(self, namespace: str) -> bool:
        """False if the namespace has no exchange binding as of this replica's latest write
        (True may also mean it had some once): a queue binder reads it right after its write,
        and reads its exchange's edges (``sync_edges_of``, a listing of every binding of the
        exchange) only when it is True. Like ``sync_topic_key``, no sync is needed after a
        write of this replica's own."""
        ...

    async def opened(self, known: int = 0) -> list[str]:
        """The namespaces this replica has opened, once there are more than ``known``."""
        ...

    async def list_namespaces(self) -> list[str]:
        """Every namespace the store holds metadata for (opened or written by any replica,
        whether or not this one has it open), sorted, as the store has them now (after a
        sync): what a replica opens at start-up."""
        ...

    async def create_exchange(self, namespace: str, exchange: Exchange) -> Exchange:
        """Create unless it exists; return what the store holds (the winner of a race)."""
        ...

    async def delete_exchange(
        self,
        namespace: str,
        name: str,
        *,
        if_unused: bool = False,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        """Delete it and its bindings (to queues, and to and from exchanges); False if it was
        not there. ``if_unused``: only if it is the source of no binding (raises
        ``ConditionNotMet`` otherwise; bindings of which it is the destination go with it, as
        in RabbitMQ), atomically with the delete.
        ``drains``: (queue, topic) -> record, written in the same transaction (the queues'
        subscriptions on its topics that drain what was routed before)."""
        ...

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        """Create unless it exists; return what the store holds (the winner of a race). An
        exclusive queue (``queue.owner`` set) is created with its owner record, which lives
        as long as this replica's session: ``owned`` in every view."""
        ...

    async def delete_queue(
        self,
        namespace: str,
        name: str,
        *,
        condition: QueueCondition | None = None,
        subscriptions: Collection[str] = (),
    ) -> bool:
        """Delete it with its bindings, owner, consumer and drain records; False if it was
        not there. With ``condition``: only if it holds, checked atomically with the delete
        (raises ``ConditionNotMet`` otherwise). ``subscriptions``: the topics whose
        subscription of the queue must go from Pulsar, recorded (``REMOVE``) in the same
        write, so that the leader removes them if this replica dies before it does."""
        ...

    async def add_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        """False if that exact binding (same arguments) was already there; raises
        ``gateway.metadata.errors.MissingEntity`` if its queue or exchange is not there.
        ``drains``: records of the binding's queue (by topic) to write in the same
        transaction (a rebind while draining records where the unbound window ends)."""
        ...

    async def remove_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        """False if it was not there (and then ``drains`` are not written either); otherwise
        ``drains`` (topic -> record of the binding's queue) are written atomically with the
        removal, so no replica sees the binding gone without its draining subscriptions."""
        ...

    async def add_exchange_binding(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        """False if that exact binding was already there; raises ``MissingEntity`` (kind
        "exchange") if its source or its destination is not there (the source is checked
        first). ``drains``: (queue, topic) -> record, written in the same transaction."""
        ...

    async def remove_exchange_binding(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        """False if it was not there (then ``drains`` are not written); otherwise the
        ``drains`` ((queue, topic) -> record) are written atomically with the removal."""
        ...

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        """Record that ``exchange`` has a topic for ``routing_key``; False if known already."""
        ...

    async def sync_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        """Whether ZooKeeper has ``routing_key`` of ``exchange`` registered as of this
        replica's latest write (one node, where ``sync_topic_keys`` lists the exchange's every
        key). Called right after a write of this replica's own (the binder's half of the
        handshake, docs/fleet.md): ZooKeeper serves one session's read after that session's
        earlier writes, on a server that has applied everything ordered before them, so the
        read sees every write ordered before ours without a sync."""
        ...

    async def unregister_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        """Remove the record of ``routing_key``'s topic; False if it was not there."""
        ...

    async def add_consumer(
        self, namespace: str, queue: str, *, exclusive: bool, standing: Standing | None = None
    ) -> str:
        """Register a consumer of ``queue`` for as long as this replica's session lasts;
        returns its id. Raises ``ConsumerConflict`` when ``exclusive`` and the queue has a
        consumer on any replica, or when another consumer holds it exclusively (checked
        atomically), ``MissingEntity`` when the queue is gone. Marks an auto-delete queue as
        having had a consumer (``QueueCondition.ABANDONED``).

        With ``standing`` (a single-active-consumer queue's consumer, never exclusive) the
        consumer joins the queue's line (``VhostView.lines``), waiting, behind every consumer
        registered before it: its ``sequence`` is above theirs, fleet-wide. Into an empty
        line it joins active (RabbitMQ's first consumer is active as it registers),
        atomically: of two joining at once on two replicas, one is. Such a record is
        not claimed again after a lost session (its replica registers it again, at the back
        of the line, if it still runs: a claimed active record could make two active)."""
        ...

    async def remove_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        """Unregister (nothing happens if it is gone already, e.g. with its queue)."""
        ...

    async def activate_consumer(self, namespace: str, queue: str, pick: PickActive) -> bool:
        """Make the consumer that ``pick`` chooses from ``queue``'s line, as the store has it
        now, the active one, if none is and it is one of this replica's; atomically with the
        line as read (a consumer registered meanwhile makes the store read it again). True if
        this call made it active (the view shows it when this returns)."""
        ...

    async def deactivate_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        """This replica's active consumer ``consumer`` goes back to waiting, keeping its
        place in line (a quorum queue's consumer stepping down for a higher priority)."""
        ...

    def in_line(self, namespace: str, consumer: str) -> bool:
        """Whether this replica's single-active-consumer record ``consumer`` still stands in
        its queue's line: False once removed, or once the session that held it expired. A
        view may miss it for a moment while it is replaced (a change of state), this does
        not."""
        ...

    @property
    def connected(self) -> bool:
        """Whether the store can be written now (ZooKeeper: the session is connected). An
        active consumer pauses while it cannot be: its session may be expiring, and another
        replica then makes another consumer active."""
        ...

    async def wait_connected(self, connected: bool = True) -> None:
        """Until ``connected`` is as asked."""
        ...

    async def read_drain(
        self, namespace: str, queue: str, topic: str
    ) -> tuple[DrainRecord, int] | None:
        """The record as stored now, with its version (for ``update_drain``)."""
        ...

    async def update_drain(
        self, namespace: str, queue: str, topic: str, record: DrainRecord | None, *, version: int
    ) -> bool:
        """Replace the record (None: delete it) if it is still at ``version``; False if it
        changed or went meanwhile."""
        ...

    async def lead(self, namespace: str, task: Callable[[], Awaitable[None]]) -> None:
        """Stand for leader of ``namespace`` among the replicas that have it open, and run
        ``task()`` whenever this replica leads; it is cancelled when leadership is lost (the
        session ended, or the store cannot be reached) and this replica stands again.
        Returns when the store closes; cancel it to stand down."""
        ...

    async def leader_of(self, namespace: str) -> str | None:
        """The ``replica_id`` of the current leader of ``namespace`` (None: nobody stands)."""
        ...

    async def record_deliveries(self, namespace: str, record: bytes | None) -> None:
        """Replace this replica's delivery record in ``namespace`` (None: remove it): what it
        delivered and has not seen settled, for the other replicas to mark ``redelivered``
        (backend/pulsar/delivery_records.py). Unlike the owner and consumer records it
        outlives the replica: a replica that dies is exactly when the others need it."""
        ...

    async def follow_deliveries(
        self, namespace: str, update: Callable[[Mapping[str, bytes]], None]
    ) -> None:
        """Call ``update`` with every other replica's delivery record in ``namespace``
        (replica id -> record) once they are read, and again whenever one changes; through
        lost connections, until cancelled or the store closes."""
        ...

    async def delivery_recorders(self, namespace: str) -> set[str]:
        """The replicas with a delivery record in ``namespace``, as the store has them now."""
        ...

    async def drop_deliveries(self, namespace: str, replica: str) -> None:
        """Remove ``replica``'s delivery record (the leader's cleanup of dead replicas')."""
        ...

    async def live_replicas(self, namespace: str) -> set[str]:
        """The replicas that have ``namespace`` open now (its candidates for leader)."""
        ...

    async def aclose(self) -> None:
        """Close; this replica's session ends (its owner and consumer records go)."""
        ...
