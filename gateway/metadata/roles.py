"""The metadata store's roles: small protocols, one per thing the store serves.

``MetadataStore`` (store.py) is their composition, and both stores implement all of them; a
caller that needs one role can say so in its annotation (``store: Leadership``), so that a
fake for its tests implements that role alone. Every role is per namespace (``namespace`` is
``tenant/ns``: a vhost's Pulsar namespace) unless its method says otherwise. The contract
tests (tests/integration/metadata/test_contract*.py) are grouped by role and run on both
stores.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Protocol

from gateway.metadata.values import (
    DrainRecord,
    ExchangeEdges,
    PickActive,
    QueueCondition,
    VhostView,
)
from gateway.model.consumers import Standing
from gateway.model.entities import Binding, Exchange, ExchangeBinding, Queue


class Lifecycle(Protocol):
    """A replica's hold on the store: who it is, whether it can write now, its end."""

    @property
    def replica_id(self) -> str:
        """This replica's identity in the store (unique across the fleet and restarts)."""
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

    async def aclose(self) -> None:
        """Close; this replica's session ends (its owner and consumer records go)."""
        ...


class Views(Protocol):
    """The namespaces a replica has open and the views watches keep current (reads cost no
    round trip); ``list_namespaces`` is what a replica opens at start-up."""

    async def open(self, namespace: str) -> VhostView:
        """Load the namespace (once) and keep its view current; returns the view."""
        ...

    def view(self, namespace: str) -> VhostView:
        """The current view of an opened namespace."""
        ...

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        """Wait until the view's version is above ``since_version``; return it."""
        ...

    async def opened(self, known: int = 0) -> list[str]:
        """The namespaces this replica has opened, once there are more than ``known``."""
        ...

    async def list_namespaces(self) -> list[str]:
        """Every namespace the store holds metadata for (opened or written by any replica,
        whether or not this one has it open), sorted, as the store has them now (after a
        sync): what a replica opens at start-up."""
        ...


class Entities(Protocol):
    """Exchanges and queues: created if absent (the winner of a race is returned), deleted with
    everything that hangs on them, and read as the store has them now."""

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

    async def sync_queue(self, namespace: str, name: str) -> Queue | None:
        """The queue as ZooKeeper has it now, after a sync (None: not there); the view is
        brought up to date with it. For a name the view lacks: a queue declared on another
        replica a moment ago is found before the watch tells this one."""
        ...

    async def sync_exchange(self, namespace: str, name: str) -> Exchange | None:
        """Likewise for an exchange."""
        ...


class Bindings(Protocol):
    """Queue bindings and exchange-to-exchange bindings, and the synced reads of an exchange's
    edges that routing through them needs when the view may lag another replica's bind."""

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


class TopicKeys(Protocol):
    """The routing keys of topic exchanges that have a topic: the publisher's half of the
    handshake with a pattern binding (docs/fleet.md)."""

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

    async def sync_topic_keys(self, namespace: str, exchange: str) -> frozenset[str]:
        """The routing keys with a topic of ``exchange``, as ZooKeeper has them now (after a
        sync), including those registered by other replicas that this one's watches have
        not reported yet; the view learns them.

        With ``sync_bindings_of`` this closes the race of a pattern binding on one replica
        and the first message of a new key on another: each reads the other's kind of
        record after writing its own, so whichever write comes second sees the first."""
        ...


class Consumers(Protocol):
    """Consumers registered for as long as their replica's session lasts, and the lines of
    single-active-consumer queues (which one of them is active, fleet-wide)."""

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


class Drains(Protocol):
    """The drain records of subscriptions no binding needs (``DrainRecord``), changed by
    compare-and-set once written with a bind, an unbind or a delete."""

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


class Leadership(Protocol):
    """One leader per namespace among the replicas that have it open (the cleanups of dead
    replicas' records run there)."""

    async def lead(self, namespace: str, task: Callable[[], Awaitable[None]]) -> None:
        """Stand for leader of ``namespace`` among the replicas that have it open, and run
        ``task()`` whenever this replica leads; it is cancelled when leadership is lost (the
        session ended, or the store cannot be reached) and this replica stands again.
        Returns when the store closes; cancel it to stand down."""
        ...

    async def leader_of(self, namespace: str) -> str | None:
        """The ``replica_id`` of the current leader of ``namespace`` (None: nobody stands)."""
        ...

    async def live_replicas(self, namespace: str) -> set[str]:
        """The replicas that have ``namespace`` open now (its candidates for leader)."""
        ...


class Deliveries(Protocol):
    """Each replica's record of what it delivered and has not seen settled, for the others to
    mark ``redelivered`` (they outlive the replica that wrote them)."""

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
