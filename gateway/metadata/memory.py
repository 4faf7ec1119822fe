"""The metadata store in process memory: for unit tests and the in-memory backend.

It follows the same contract as the ZooKeeper store (the contract tests in
tests/integration/metadata run the same functions against both): create-if-absent returns the
winner, deleting a queue or an exchange deletes its bindings (an exchange also its topic keys),
a binding needs its queue and exchange, bindings are told apart by their exact typed arguments,
``open`` creates the predeclared exchanges of a vhost, exclusive owners and consumers live as
long as the session that wrote them, and one replica per namespace leads.

Several "replicas" share one state to model a fleet without ZooKeeper: ``replica()`` gives
another store on the same state with a session of its own, and ``aclose()`` ends a session as
a replica's death would (its owner and consumer records go, its candidacies too). Every caller
sees the same views, and a write is visible to all of them when it returns.
``available = False`` simulates losing ZooKeeper: writes raise ``MetadataUnavailable``, views
keep being served.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

import trio

from gateway.metadata.codec import (
    ConsumerKey,
    DrainKey,
    TopicKey,
    binding_id,
    exchange_binding_id,
)
from gateway.metadata.errors import ConditionNotMet, ConsumerConflict, MissingEntity
from gateway.metadata.mirror import make_view
from gateway.metadata.values import (
    REMOVE,
    DrainRecord,
    ExchangeEdges,
    MetadataUnavailable,
    PickActive,
    QueueCondition,
    VhostView,
    by_queue,
)
from gateway.model.consumers import LinePlace, Standing
from gateway.model.entities import (
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeBinding,
    Queue,
)

__all__ = ["MemoryMetadataStore"]


async def _first_of(*events: trio.Event) -> None:
    """Until one of ``events`` is set."""
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)


@dataclass(frozen=True, slots=True)
class _Consumer:
    queue: str
    session: str
    exclusive: bool
    # A single-active-consumer queue's consumer: its place in line.
    place: LinePlace | None = None


@dataclass(eq=False)
class _Namespace:
    exchanges: dict[str, Exchange] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    # Keyed by the binding's identity (queue, exchange, key, exact arguments), as in ZooKeeper.
    bindings: dict[str, Binding] = field(default_factory=dict)
    exchange_bindings: dict[str, ExchangeBinding] = field(default_factory=dict)
    topic_keys: set[TopicKey] = field(default_factory=set)
    # Queue -> the session that owns it (exclusive queues whose owner is alive).
    owners: dict[str, str] = field(default_factory=dict)
    # Consumer id -> who registered it.
    consumers: dict[str, _Consumer] = field(default_factory=dict)
    # Auto-delete queues that have had a consumer.
    consumed: set[str] = field(default_factory=set)
    # (queue, topic) -> (record, version).
    drains: dict[tuple[str, str], tuple[DrainRecord, int]] = field(default_factory=dict)
    # Replica -> its delivery record; set-and-replaced when one changes.
    deliveries: dict[str, bytes] = field(default_factory=dict)
    deliveries_changed: trio.Event = field(default_factory=trio.Event)
    # Sessions standing for leader, first = leader; set-and-replaced when it changes.
    candidates: list[str] = field(default_factory=list)
    election: trio.Event = field(default_factory=trio.Event)
    # The last sequence given to a single-active-consumer queue's consumer (one counter per
    # namespace: a queue's line only needs them increasing).
    sequence: int = 0
    version: int = 0
    opened: bool = False
    event: trio.Event = field(default_factory=trio.Event)
    snapshot: VhostView | None = None

    def touch(self) -> None:
        self.version += 1
        self.event.set()
        self.event = trio.Event()

    def view(self) -> VhostView:
        if self.snapshot is None or self.snapshot.version != self.version:
            self.snapshot = make_view(
                self.version,
                self.exchanges.values(),
                self.queues.values(),
                self.bindings.values(),
                self.topic_keys,
                owned=self.owners,
                consumers=[
                    ConsumerKey(c.queue, c.session, 0, c.place) for c in self.consumers.values()
                ],
                drains=[DrainKey(q, t, record) for (q, t), (record, _) in self.drains.items()],
                exchange_bindings=self.exchange_bindings.values(),
            )
        return self.snapshot

    def stand_down(self, session: str) -> None:
        if session in self.candidates:
            self.candidates.remove(session)
            self.election.set()
            self.election = trio.Event()

    def put_drains(self, drains: Mapping[tuple[str, str], DrainRecord] | None) -> None:
        for (queue, topic), record in (drains or {}).items():
            self.put_drain(queue, topic, record)

    def changed(self, drains: Mapping[tuple[str, str], DrainRecord] | None) -> bool:
        """Finish a change made: write the drain records that go with it and count it.
        True, what a store method returns for a change it made."""
        self.put_drains(drains)
        self.touch()
        return True

    def put_drain(self, queue: str, topic: str, record: DrainRecord) -> None:
        known = self.drains.get((queue, topic))
        self.drains[(queue, topic)] = (record, 0 if known is None else known[1] + 1)


@dataclass(eq=False)
class _Shared:
    """The state every replica of one memory "fleet" sees."""

    namespaces: dict[str, _Namespace] = field(default_factory=dict)
    sessions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class MemoryMetadataStore:
    """Implements ``MetadataStore`` with dicts; writes complete at once (they checkpoint, so a
    task that writes in a loop still lets others run)."""

    def __init__(self, shared: _Shared | None = None) -> None:
        self._shared = shared if shared is not None else _Shared()
        self._session = f"memory-{next(self._shared.sessions)}"
        self._serials = itertools.count(1)
        self._opened: list[str] = []
        self._opened_changed = trio.Event()
        self._closed = trio.Event()
        self._available = True
        self._availability = trio.Event()  # set and replaced when ``available`` changes

    @property
    def replica_id(self) -> str:
        return self._session

    def replica(self) -> MemoryMetadataStore:
        """Another replica of the same fleet: the same state, a session of its own."""
        return MemoryMetadataStore(self._shared)

    def _namespace(self, namespace: str) -> _Namespace:
        state = self._shared.namespaces.get(namespace)
        if state is None:
            state = self._shared.namespaces[namespace] = _Namespace()
        return state

    async def _write(self, namespace: str) -> _Namespace:
        await trio.lowlevel.checkpoint()
        if self._closed.is_set():
            raise MetadataUnavailable("the metadata store is closed")
        if not self.available:
            raise MetadataUnavailable(
                "the metadata store is unavailable (simulated): metadata changes are refused "
                "until it is back"
            )
        return self._namespace(namespace)

    # ------------------------------------------------------------------ views

    async def open(self, namespace: str) -> VhostView:
        await trio.lowlevel.checkpoint()
        state = self._namespace(namespace)
        if not state.opened:
            missing = [e for e in PREDECLARED_EXCHANGES if e.name not in state.exchanges]
            if missing and not self.available:
                raise MetadataUnavailable(
                    f"cannot open namespace {namespace!r}: the metadata store is unavailable"
                )
            for exchange in missing:
                state.exchanges[exchange.name] = exchange
            if missing:
                state.touch()
            state.opened = True
        if namespace not in self._opened:
            self._opened.append(namespace)
            self._opened_changed.set()
            self._opened_changed = trio.Event()
        return state.view()

    def view(self, namespace: str) -> VhostView:
        state = self._shared.namespaces.get(namespace)
        if state is None or not state.opened:
            raise KeyError(f"namespace {namespace!r} is not open")
        return state.view()

    async def changed(self, namespace: str, since_version: int) -> VhostView:
        state = self._namespace(namespace)
        if state.version > since_version:
            await trio.lowlevel.checkpoint()
        while state.version <= since_version:
            await state.event.wait()
        return state.view()

    async def sync_queue(self, namespace: str, name: str) -> Queue | None:
        await trio.lowlevel.checkpoint()  # every view is current already
        return self._namespace(namespace).queues.get(name)

    async def sync_exchange(self, namespace: str, name: str) -> Exchange | None:
        await trio.lowlevel.checkpoint()
        return self._namespace(namespace).exchanges.get(name)

    async def sync_topic_keys(self, namespace: str, exchange: str) -> frozenset[str]:
        await trio.lowlevel.checkpoint()
        keys = self._namespace(namespace).topic_keys
        return frozenset(key.routing_key for key in keys if key.exchange == exchange)

    async def sync_bindings_of(self, namespace: str, exchange: str) -> frozenset[tuple[str, str]]:
        await trio.lowlevel.checkpoint()
        bindings = self._namespace(namespace).bindings.values()
        return frozenset((b.queue, b.routing_key) for b in bindings if b.exchange == exchange)

    async def sync_edges_of(self, namespace: str, exchange: str) -> ExchangeEdges:
        await trio.lowlevel.checkpoint()
        state = self._namespace(namespace)
        edges = state.exchange_bindings.values()
        return ExchangeEdges(
            frozenset(
                (b.queue, b.routing_key) for b in state.bindings.values() if b.exchange == exchange
            ),
            frozenset((b.destination, b.routing_key) for b in edges if b.source == exchange),
            frozenset((b.source, b.routing_key) for b in edges if b.destination == exchange),
        )

    async def sync_has_exchange_bindings(self, namespace: str) -> bool:
        await trio.lowlevel.checkpoint()
        return bool(self._namespace(namespace).exchange_bindings)

    async def opened(self, known: int = 0) -> list[str]:
        if len(self._opened) > known:
            await trio.lowlevel.checkpoint()
        while len(self._opened) <= known:
            await self._opened_changed.wait()
        return list(self._opened)

    async def list_namespaces(self) -> list[str]:
        await trio.lowlevel.checkpoint()
        # A namespace that was only read (``sync_*``, ``changed``) has a state here but no
        # node in ZooKeeper: only opened or written ones count, as there.
        return sorted(
            name
            for name, state in self._shared.namespaces.items()
            if state.opened or state.version > 0
        )

    # ------------------------------------------------------------------ exchanges

    async def create_exchange(self, namespace: str, exchange: Exchange) -> Exchange:
        state = await self._write(namespace)
        existing = state.exchanges.get(exchange.name)
        if existing is not None:
            return existing
        state.exchanges[exchange.name] = exchange
        state.touch()
        return exchange

    async def delete_exchange(
        self,
        namespace: str,
        name: str,
        *,
        if_unused: bool = False,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        state = await self._write(namespace)
        if name not in state.exchanges:
            return False
        # RabbitMQ's if-unused (has_for_source): bindings it is the source of, to queues or
        # to exchanges; those it is the destination of go with it.
        if if_unused and (
            any(b.exchange == name for b in state.bindings.values())
            or any(b.source == name for b in state.exchange_bindings.values())
        ):
            raise ConditionNotMet("exchange", name, "it has bindings")
        del state.exchanges[name]
        for key, binding in list(state.bindings.items()):
            if binding.exchange == name:
                del state.bindings[key]
        for key, edge in list(state.exchange_bindings.items()):
            if name in (edge.source, edge.destination):
                del state.exchange_bindings[key]
        state.topic_keys = {key for key in state.topic_keys if key.exchange != name}
        return state.changed(drains)

    # ------------------------------------------------------------------ queues

    async def create_queue(self, namespace: str, queue: Queue) -> Queue:
        state = await self._write(namespace)
        existing = state.queues.get(queue.name)
        if existing is not None:
            return existing
        state.queues[queue.name] = queue
        if queue.owner is not None:
            state.owners[queue.name] = self._session
        state.touch()
        return queue

    async def delete_queue(
        self,
        namespace: str,
        name: str,
        *,
        condition: QueueCondition | None = None,
        subscriptions: Collection[str] = (),
    ) -> bool:
        state = await self._write(namespace)
        queue = state.queues.get(name)
        if queue is None:
            return False
        consumers = [key for key, c in state.consumers.items() if c.queue == name]
        if condition is QueueCondition.UNUSED and consumers:
            raise ConditionNotMet("queue", name, "it has consumers")
        if condition is QueueCondition.ABANDONED and (
            consumers or not queue.auto_delete or name not in state.consumed
        ):
            raise ConditionNotMet("queue", name, "it has consumers or never had one")
        if condition is QueueCondition.ORPHANED and (queue.owner is None or name in state.owners):
            raise ConditionNotMet("queue", name, "its owner is alive")
        del state.queues[name]
        for key, binding in list(state.bindings.items()):
            if binding.queue == name:
                del state.bindings[key]
        state.owners.pop(name, None)
        for key in consumers:
            del state.consumers[key]
        state.consumed.discard(name)
        for drain in [drain for drain in state.drains if drain[0] == name]:
            del state.drains[drain]
        for topic in subscriptions:
            state.put_drain(name, topic, REMOVE)
        state.touch()
        return True

    # ------------------------------------------------------------------ bindings

    async def add_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        state = await self._write(namespace)
        if binding.queue not in state.queues:
            raise MissingEntity("queue", binding.queue)
        if binding.exchange not in state.exchanges:
            raise MissingEntity("exchange", binding.exchange)
        key = binding_id(binding)
        if key in state.bindings:
            return False
        state.bindings[key] = binding
        return state.changed(by_queue(binding.queue, drains))

    async def remove_binding(
        self,
        namespace: str,
        binding: Binding,
        *,
        drains: Mapping[str, DrainRecord] | None = None,
    ) -> bool:
        state = await self._write(namespace)
        if state.bindings.pop(binding_id(binding), None) is None:
            return False
        return state.changed(by_queue(binding.queue, drains))

    async def add_exchange_binding(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        state = await self._write(namespace)
        for end in (binding.source, binding.destination):
            if end not in state.exchanges:
                raise MissingEntity("exchange", end)
        key = exchange_binding_id(binding)
        if key in state.exchange_bindings:
            return False
        state.exchange_bindings[key] = binding
        return state.changed(drains)

    async def remove_exchange_binding(
        self,
        namespace: str,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        state = await self._write(namespace)
        if state.exchange_bindings.pop(exchange_binding_id(binding), None) is None:
            return False
        return state.changed(drains)

    async def register_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        state = await self._write(namespace)
        key = TopicKey(exchange, routing_key)
        if key in state.topic_keys:
            return False
        state.topic_keys.add(key)
        state.touch()
        return True

    async def sync_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        await trio.lowlevel.checkpoint()
        return TopicKey(exchange, routing_key) in self._namespace(namespace).topic_keys

    async def unregister_topic_key(self, namespace: str, exchange: str, routing_key: str) -> bool:
        state = await self._write(namespace)
        key = TopicKey(exchange, routing_key)
        if key not in state.topic_keys:
            return False
        state.topic_keys.discard(key)
        state.touch()
        return True

    # ------------------------------------------------------------------ consumers

    async def add_consumer(
        self, namespace: str, queue: str, *, exclusive: bool, standing: Standing | None = None
    ) -> str:
        state = await self._write(namespace)
        target = state.queues.get(queue)
        if target is None:
            raise MissingEntity("queue", queue)
        others = [c for c in state.consumers.values() if c.queue == queue]
        if any(c.exclusive for c in others) or (exclusive and others):
            raise ConsumerConflict(queue)
        consumer = f"{self._session},{next(self._serials)}"
        place = None
        if standing is not None:
            state.sequence += 1
            alone = not any(c.place for c in others)  # the first one is active at once
            place = LinePlace(
                consumer,
                self._session,
                state.sequence,
                standing.priority,
                standing.credit,
                active=alone,
            )
        state.consumers[consumer] = _Consumer(queue, self._session, exclusive, place)
        if target.auto_delete:
            state.consumed.add(queue)
        state.touch()
        return consumer

    async def remove_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        state = await self._write(namespace)
        if state.consumers.pop(consumer, None) is not None:
            state.touch()

    async def activate_consumer(self, namespace: str, queue: str, pick: PickActive) -> bool:
        state = await self._write(namespace)
        line = sorted(
            (c.place for c in state.consumers.values() if c.queue == queue and c.place),
            key=lambda place: place.sequence,
        )
        if any(place.active for place in line):
            return False
        chosen = pick(line)
        if chosen is None or chosen.replica != self._session:
            return False
        known = state.consumers.get(chosen.consumer)
        if known is None or known.place is None:
            return False
        state.consumers[chosen.consumer] = replace(known, place=replace(known.place, active=True))
        state.touch()
        return True

    async def deactivate_consumer(self, namespace: str, queue: str, consumer: str) -> None:
        state = await self._write(namespace)
        known = state.consumers.get(consumer)
        if known is not None and known.place is not None and known.place.active:
            state.consumers[consumer] = replace(known, place=replace(known.place, active=False))
            state.touch()

    def in_line(self, namespace: str, consumer: str) -> bool:
        known = self._namespace(namespace).consumers.get(consumer)
        return known is not None and known.place is not None

    @property
    def available(self) -> bool:
        """False simulates losing ZooKeeper (see the module's docstring)."""
        return self._available

    @available.setter
    def available(self, available: bool) -> None:
        self._available = available
        self._availability.set()
        self._availability = trio.Event()

    @property
    def connected(self) -> bool:
        return self._available and not self._closed.is_set()

    async def wait_connected(self, connected: bool = True) -> None:
        while self.connected != connected:
            await _first_of(self._availability, self._closed)

    # ------------------------------------------------------------------ drains

    async def read_drain(
        self, namespace: str, queue: str, topic: str
    ) -> tuple[DrainRecord, int] | None:
        await trio.lowlevel.checkpoint()
        return self._namespace(namespace).drains.get((queue, topic))

    async def update_drain(
        self, namespace: str, queue: str, topic: str, record: DrainRecord | None, *, version: int
    ) -> bool:
        state = await self._write(namespace)
        known = state.drains.get((queue, topic))
        if known is None or known[1] != version:
            return False
        if record is None:
            del state.drains[(queue, topic)]
        else:
            state.put_drain(queue, topic, record)
        state.touch()
        return True

    # ------------------------------------------------------------------ leadership

    async def lead(self, namespace: str, task: Callable[[], Awaitable[None]]) -> None:
        state = self._namespace(namespace)
        if self._closed.is_set():
            raise MetadataUnavailable("the metadata store is closed")
        state.candidates.append(self._session)
        try:
            while not self._closed.is_set():
                if state.candidates[0] == self._session:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(task)
                        await self._closed.wait()
                        nursery.cancel_scope.cancel()
                    return
                await state.election.wait()
        finally:
            state.stand_down(self._session)

    async def leader_of(self, namespace: str) -> str | None:
        await trio.lowlevel.checkpoint()
        candidates = self._namespace(namespace).candidates
        return candidates[0] if candidates else None

    async def live_replicas(self, namespace: str) -> set[str]:
        await trio.lowlevel.checkpoint()
        return set(self._namespace(namespace).candidates)

    # ------------------------------------------------------------------ delivery records

    async def record_deliveries(self, namespace: str, record: bytes | None) -> None:
        self._set_deliveries(await self._write(namespace), self._session, record)

    @staticmethod
    def _set_deliveries(state: _Namespace, replica: str, record: bytes | None) -> None:
        if record is None:
            if state.deliveries.pop(replica, None) is None:
                return
        else:
            state.deliveries[replica] = record
        state.deliveries_changed.set()
        state.deliveries_changed = trio.Event()

    async def follow_deliveries(
        self, namespace: str, update: Callable[[Mapping[str, bytes]], None]
    ) -> None:
        state = self._namespace(namespace)
        while not self._closed.is_set():
            changed = state.deliveries_changed
            update({r: d for r, d in state.deliveries.items() if r != self._session})
            await _first_of(changed, self._closed)

    async def delivery_recorders(self, namespace: str) -> set[str]:
        await trio.lowlevel.checkpoint()
        return set(self._namespace(namespace).deliveries)

    async def drop_deliveries(self, namespace: str, replica: str) -> None:
        self._set_deliveries(await self._write(namespace), replica, None)

    async def aclose(self) -> None:
        """End this replica's session: its owner and consumer records and its candidacies go,
        as ZooKeeper's would when a replica dies. The other replicas go on."""
        await trio.lowlevel.checkpoint()
        if self._closed.is_set():
            return
        self._closed.set()
        for state in self._shared.namespaces.values():
            owned = [queue for queue, session in state.owners.items() if session == self._session]
            consumers = [k for k, c in state.consumers.items() if c.session == self._session]
            for queue in owned:
                del state.owners[queue]
            for key in consumers:
                del state.consumers[key]
            state.stand_down(self._session)
            if owned or consumers:
                state.touch()
