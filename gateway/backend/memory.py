"""An in-process backend: entities in the in-memory metadata store, messages in deques.

It answers the ``VirtualHost`` interface with RabbitMQ's semantics (the entity rules are the
shared ``Catalog``'s), so the channel logic can be tested without Pulsar or ZooKeeper, and the
same behavioural tests run against both backends. Nothing is durable.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.backend.catalog import Catalog, CatalogVirtualHost
from gateway.backend.dead_letter_message import letter_for
from gateway.backend.expiration_property import check_expiration, has_expiration
from gateway.backend.interface import (
    NO_QOS,
    ConsumerQos,
    Message,
    Owner,
    PublishOutcome,
    QueueStatus,
    QueueSubscription,
    ReceivesByWaiting,
    SubscriptionEnded,
)
from gateway.backend.memory_stream import MemoryStream, MemoryStreamSubscription
from gateway.backend.overflow import RefusedStored
from gateway.backend.replies import ReplyRegistry
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import MetadataStore
from gateway.model.arguments import is_stream, queue_type_named
from gateway.model.consumers import (
    LinePlace,
    consumer_credit,
    consumer_priority,
    preempting,
    single_active,
    successor,
)
from gateway.model.dead_letter import Reason
from gateway.model.entities import Exchange, resource
from gateway.model.length_limit import LengthLimit, length_limit
from gateway.model.priority import PriorityBuffer, effective_priority, max_priority
from gateway.model.streams import (
    check_stream_consume,
    parse_offset,
    refuse_get,
    refuse_purge,
    stream_filter,
    stream_retention,
)
from gateway.model.ttl import effective_ttl, is_expired, queue_expires, queue_message_ttl
from gateway.model.vhost import VhostMapper

# How often a waiting consumer has expired messages removed (see MemorySubscription).
EXPIRY_TICK = 0.1


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class MemoryDelivery:
    queue: MemoryQueue
    message: Message
    redelivered: bool
    enqueued: int  # ms: a requeued message keeps its expiry (RabbitMQ's TTL)
    place: int  # its place in the queue's line: a requeue puts it back there
    settled: bool = False

    async def ack(self) -> None:
        self.ack_now()

    def ack_now(self) -> None:
        self.settled = True
        self.queue.settled()

    async def reject(self, requeue: bool) -> None:
        if self.settled:
            return
        self.settled = True
        self.queue.settled()
        if requeue:
            self.queue.requeue(self.message, self.enqueued, self.place)
        else:
            self.queue.dead_letter(self.queue.name, self.message, "rejected")


@dataclass(eq=False)
class MemoryQueue:
    name: str
    # Sends a message leaving the queue to its dead-letter exchange, if it has one.
    dead_letter: Callable[[str, Message, Reason], None]
    ttl: int | None = None  # x-message-ttl
    limit: LengthLimit | None = None  # x-max-length, x-max-length-bytes, x-overflow
    maximum: int | None = None  # x-max-priority (None: every message counts as priority 0)
    # (message, redelivered, when it entered the queue in ms), in delivery order: the highest
    # priority first, first in first out within one (model/priority.py)
    ready: PriorityBuffer[tuple[Message, bool, int]] = field(default_factory=PriorityBuffer)
    subscriptions: list[MemorySubscription] = field(default_factory=list)
    exclusive_consumer: bool = False
    # x-single-active-consumer: the queue's type ("classic" or "quorum", whose rules differ:
    # model/consumers.py); None without.
    single_active: str | None = None
    # Consumers so far (each one's place in registration order), and messages they took.
    registered: int = 0
    takes: int = 0
    deleted: bool = False
    changed: trio.Event = field(default_factory=trio.Event)
    # The body bytes of the ready messages (RabbitMQ's message_bytes_ready).
    ready_bytes: int = 0
    # A ready message may carry its own expiration (set when one comes in, cleared when a
    # walk finds none): without it and without x-message-ttl nothing can expire, and
    # ``count``, run on every Basic.Get, need not walk (and sort) the whole queue.
    expiring: bool = False

    def _signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def wake(self) -> None:
        self._signal()

    def line(self) -> list[LinePlace]:
        return [s.place for s in self.subscriptions]

    def rearrange(self) -> None:
        """A single-active-consumer queue's consumers changed (one came, went, or settled
        what it held): on a quorum queue the active one starts stepping down when one of
        higher priority waits (and goes on once started: rabbit_fifo's ``quiescing``),
        steps down once it holds nothing unsettled, and the next one becomes active
        (model/consumers.py)."""
        if self.single_active is None:
            return
        kind = self.single_active
        active = next((s for s in self.subscriptions if s.active), None)
        if active is not None:
            if preempting(self.line(), kind) is not None:
                active.quiescing = True
            if active.quiescing and not active.unsettled():
                active.active = active.quiescing = False
                active = None
        if active is None:
            chosen = successor(self.line(), kind)
            for subscription in self.subscriptions:
                subscription.active = subscription.place == chosen
        self._signal()

    def settled(self) -> None:
        """A delivery was settled: a quiescing active consumer may now step down."""
        if self.single_active is not None:
            self.rearrange()

    def may_take(self, subscription: MemorySubscription) -> bool:
        """Whether ``subscription`` may take a message now: the active consumer of a
        single-active-consumer queue (and not stepping down), or, among competing consumers,
        one that no consumer of higher priority waiting for a message outranks (RabbitMQ
        delivers to the highest priority that is not blocked; a consumer waits in ``receive``
        only while it has prefetch credit)."""
        if self.single_active is not None:
            return subscription.active and not subscription.quiescing
        # Round-robin among equals: the one that took least recently goes first.
        rank = (-subscription.priority, subscription.last_take)
        return not any(
            other.waiting and (-other.priority, other.last_take) < rank
            for other in self.subscriptions
        )

    def took(self, subscription: MemorySubscription) -> None:
        self.takes += 1
        subscription.last_take = self.takes

    def _priority(self, message: Message) -> int:
        if self.maximum is None:
            return 0
        return effective_priority(message.properties.priority, self.maximum)

    def push(self, message: Message) -> None:
        self.ready.push((message, False, now_ms()), self._priority(message))
        self.expiring = self.expiring or has_expiration(message)
        self.ready_bytes += len(message.body)
        self._signal()

    def requeue(self, message: Message, enqueued: int, place: int) -> None:
        if not self.deleted:
            # RabbitMQ puts a requeued message back at its original position (in its own
            # priority, in a priority queue): ahead of everything that came after it.
            self.ready.restore((message, True, enqueued), self._priority(message), place)
            self.expiring = self.expiring or has_expiration(message)
            self.ready_bytes += len(message.body)
            self.drop_head()
            self._signal()

    def take(self) -> MemoryDelivery | None:
        while self.ready:
            place, (message, redelivered, enqueued) = self.ready.pop_entry()
            self.ready_bytes -= len(message.body)
            if not self._expired(message, enqueued):
                return MemoryDelivery(self, message, redelivered, enqueued, place)
            self.dead_letter(self.name, message, "expired")
        return None

    def _expired(self, message: Message, enqueued: int) -> bool:
        if self.ttl is None and not has_expiration(message):
            return False
        ttl = effective_ttl(self.ttl, message.properties.expiration)
        return is_expired(enqueued, ttl, now_ms())

    def count(self) -> int:
        """Messages ready, expired ones removed first (dead-lettered if so configured)."""
        if self.ttl is None and not self.expiring:
            return len(self.ready)  # nothing here can expire
        expiring = False

        def unexpired(entry: tuple[Message, bool, int]) -> bool:
            nonlocal expiring
            message, _redelivered, enqueued = entry
            if self._expired(message, enqueued):
                return False
            expiring = expiring or has_expiration(message)
            return True

        for message, _redelivered, _enqueued in self.ready.keep(unexpired):
            self.ready_bytes -= len(message.body)
            self.dead_letter(self.name, message, "expired")
        self.expiring = expiring
        return len(self.ready)

    def drop_head(self) -> None:
        """x-overflow drop-head: while the queue is over either limit, its head leaves,
        dead-lettered with reason ``maxlen``: the oldest message of the highest priority in a
        priority queue (rabbit_priority_queue:drop), the oldest otherwise. RabbitMQ does it
        after each publish and each requeue (rabbit_amqqueue_process:maybe_drop_head); a body
        larger than the byte limit pushes everything out, itself included."""
        limit = self.limit
        if (
            limit is None
            or limit.rejects_publish
            or not limit.over(len(self.ready), self.ready_bytes)
        ):
            return  # (expired messages only make a queue smaller: no need to look for them)
        ready = self.count()  # expired messages leave first (and do not count)
        while ready and limit.over(ready, self.ready_bytes):
            message = self.ready.pop()[0]
            self.ready_bytes -= len(message.body)
            ready -= 1
            self.dead_letter(self.name, message, "maxlen")

    def has_room(self, limit: LengthLimit, message: Message) -> bool:
        """Whether ``message`` fits within ``limit`` (reject-publish), expired messages left
        out (looked for only when the queue would be full with them)."""
        size = len(message.body)
        if limit.has_room(len(self.ready), self.ready_bytes, size):
            return True
        return limit.has_room(self.count(), self.ready_bytes, size)

    def clear(self) -> None:
        self.ready.clear()
        self.ready_bytes = 0

    def delete(self) -> None:
        self.deleted = True
        self.clear()
        self._signal()


@dataclass(eq=False)
class MemorySubscription(ReceivesByWaiting):
    queue: MemoryQueue
    on_closed: Callable[[MemoryQueue], Awaitable[None]]
    # Removes expired messages from every queue of the vhost (dead-lettering them): run while
    # a consumer waits, this backend's timer for TTLs (delay queues have no consumer).
    expire_all: Callable[[], None] = lambda: None
    outstanding: list[MemoryDelivery] = field(default_factory=list)
    closed: bool = False
    priority: int = 0  # x-priority
    # Where it stands among a single-active-consumer queue's consumers (credit and place in
    # registration order), and whether it is the active one.
    credit: int = 0
    sequence: int = 0
    active: bool = False
    quiescing: bool = False  # active, stepping down for a higher priority (quorum queues)
    # In ``receive`` (so not blocked by its prefetch): consumers of lower priority wait.
    waiting: bool = False
    last_take: int = 0  # when it last took a message (the queue's count of takes then)

    @property
    def activity_status(self) -> str:
        """RabbitMQ's ``activity_status`` (backend/interface.py ``TakesTurns``)."""
        if self.queue.single_active is None:
            return "up"
        return "single_active" if self.active else "waiting"

    @property
    def place(self) -> LinePlace:
        return LinePlace(
            str(self.sequence), "", self.sequence, self.priority, self.credit, self.active
        )

    def unsettled(self) -> bool:
        return any(not d.settled for d in self.outstanding)

    async def receive(
        self, before_wait: Callable[[], Awaitable[None]] | None = None
    ) -> MemoryDelivery:
        self.waiting = True
        try:
            return await self._receive(before_wait)
        finally:
            self.waiting = False
            if self.queue.ready:
                # Others may have left messages to this one (priority, round-robin): they
                # look again now that it stopped waiting.
                self.queue.wake()

    async def _receive(self, before_wait: Callable[[], Awaitable[None]] | None) -> MemoryDelivery:
        while True:
            if self.queue.deleted:
                raise SubscriptionEnded(self.queue.name)
            delivery = self.queue.take() if self.queue.may_take(self) else None
            if delivery is not None:
                self.queue.took(self)
                self.outstanding = [d for d in self.outstanding if not d.settled]
                self.outstanding.append(delivery)
                return delivery
            if before_wait is not None:
                flush, before_wait = before_wait, None
                await flush()
                continue  # the queue may have changed while that ran
            with trio.move_on_after(EXPIRY_TICK):
                await self.queue.changed.wait()
            self.expire_all()

    async def retire(self, spawn: Callable[[Callable[[], Awaitable[None]]], None]) -> bool:
        """Basic.Cancel with deliveries unacknowledged: leave the queue's consumers; those
        deliveries stay unsettled, with the channel (settled later, or given back when it
        closes). ``spawn`` is unused here (nothing to close later). False (nothing done) on a
        single-active-consumer queue, whose next consumer takes over what the cancelled one
        held, as on Pulsar (docs/compatibility.md): the caller closes it then."""
        if self.queue.single_active is not None:
            return False
        if not self.closed:
            self.closed = True
            await self._leave()
        return True

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for delivery in self.outstanding:
            await delivery.reject(requeue=True)
        self.outstanding.clear()
        await self._leave()

    async def _leave(self) -> None:
        self.queue.subscriptions.remove(self)
        self.queue.exclusive_consumer = False
        self.queue.rearrange()
        await self.on_closed(self.queue)


class MemoryVirtualHost(CatalogVirtualHost):
    def __init__(self, name: str, namespace: str, store: MetadataStore) -> None:
        self.name = name
        self.catalog = Catalog(name, namespace, store)
        self.replies = ReplyRegistry()  # one process: no other replica to forward to
        self._queues: dict[str, MemoryQueue] = {}
        self._streams: dict[str, MemoryStream] = {}
        self._last_used: dict[str, float] = {}  # x-expires: each queue's latest use

    def _messages(self, name: str) -> MemoryQueue:
        """The message store of a queue the catalog knows (created on first use)."""
        queue = self._queues.get(name)
        if queue is None:
            entity = self.catalog.view.queues.get(name)
            arguments = {} if entity is None else entity.arguments
            queue = self._queues[name] = MemoryQueue(
                name,
                self._dead_letter,
                queue_message_ttl(arguments),
                length_limit(arguments),
                max_priority(arguments),
                single_active=queue_type_named(arguments) if single_active(arguments) else None,
            )
        return queue

    def _stream(self, name: str) -> MemoryStream | None:
        """The log of stream queue ``name`` (created on first use), None for another type."""
        stream = self._streams.get(name)
        if stream is None:
            entity = self.catalog.view.queues.get(name)
            if entity is None or not is_stream(entity.arguments):
                return None
            stream = self._streams[name] = MemoryStream(name, stream_retention(entity.arguments))
        return stream

    # ------------------------------------------------------------------ entities

    async def declare_queue(self, command: cmd.QueueDeclare, owner: Owner) -> QueueStatus:
        await self._expire_queues()
        await self.catalog.declare_queue(command, owner)
        stream = self._stream(command.queue)
        if stream is not None:  # RabbitMQ's stat of a stream counts no consumers
            return QueueStatus(command.queue, stream.count(), 0)
        queue = self._messages(command.queue)
        if not command.passive:
            self._used(command.queue)  # a redeclare renews an x-expires lease
        self._expire_all()
        return QueueStatus(command.queue, queue.count(), len(queue.subscriptions))

    async def delete_queue(self, command: cmd.QueueDelete, owner: Owner) -> int:
        name = command.queue
        view = self.catalog.view
        if name not in view.queues:
            return 0  # idempotent, as in RabbitMQ
        self.catalog.queue(view, name, owner)
        if self._stream(name) is not None:
            # rabbit_stream_queue:delete ignores if-unused and if-empty and answers 0.
            await self._drop_queue(name)
            return 0
        queue = self._messages(name)
        where = resource("queue", name, self.name)
        if command.if_unused and queue.subscriptions:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"{where} in use")
        if command.if_empty and queue.count():
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"{where} not empty")
        count = queue.count()
        await self._drop_queue(name)
        return count

    async def _drop_queue(self, name: str) -> None:
        await self.catalog.delete_queue(name)
        queue = self._queues.pop(name, None)
        if queue is not None:
            queue.delete()
        stream = self._streams.pop(name, None)
        if stream is not None:
            stream.delete()

    async def purge_queue(self, command: cmd.QueuePurge, owner: Owner) -> int:
        self.catalog.queue(self.catalog.view, command.queue, owner)
        if self._stream(command.queue) is not None:
            raise refuse_purge(resource("queue", command.queue, self.name))
        queue = self._messages(command.queue)
        count = queue.count()
        queue.clear()
        return count

    async def bind_queue(self, command: cmd.QueueBind, owner: Owner) -> None:
        binding, _exchange = await self.catalog.binding(command, owner)
        await self.catalog.add_binding(binding)

    async def unbind_queue(self, command: cmd.QueueUnbind, owner: Owner) -> None:
        # In memory a routed message is in the queue's deque already: nothing to drain.
        binding = await self.catalog.unbinding(command, owner)
        if binding is not None:
            await self.catalog.remove_binding(binding)

    async def bind_exchange(self, command: cmd.ExchangeBind) -> None:
        await self.catalog.add_exchange_binding(await self.catalog.exchange_binding(command))

    async def unbind_exchange(self, command: cmd.ExchangeUnbind) -> None:
        binding = await self.catalog.exchange_unbinding(command)
        if binding is not None:
            await self.catalog.remove_exchange_binding(binding)

    # ------------------------------------------------------------------ messages

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        return self._publish(message, mandatory)

    def publish_now(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        # In memory a publish never waits.
        return self._publish(message, mandatory)

    def _publish(self, message: Message, mandatory: bool) -> PublishOutcome:
        view = self.catalog.view
        exchange = self.catalog.publish_target(view, message.exchange)
        check_expiration(message)
        names = self._route(exchange, message)
        refused = [name for name in sorted(names) if not self._enqueue(name, message)]
        if refused:
            return PublishOutcome(routed=True, stored=RefusedStored(refused))
        return PublishOutcome(routed=bool(names))

    def _enqueue(self, name: str, message: Message) -> bool:
        """Put ``message`` in queue ``name`` within its length limit; False if refused."""
        stream = self._stream(name)
        if stream is not None:
            stream.append(message)
            return True
        queue = self._messages(name)
        limit = queue.limit
        if limit is not None and limit.rejects_publish and not queue.has_room(limit, message):
            if limit.dead_letters_rejected:
                self._dead_letter(name, message, "maxlen")
            return False
        queue.push(message)
        queue.drop_head()
        return True

    def _route(self, exchange: Exchange, message: Message) -> set[str]:
        """The queues ``message`` reaches through ``exchange``: RabbitMQ's walk through
        exchange bindings and alternate exchanges (rabbit_exchange:route, model/graph.py)."""
        return self.catalog.destinations(self.catalog.view, exchange, message)

    def _dead_letter(self, queue: str, message: Message, reason: Reason) -> None:
        """RabbitMQ's dead-lettering (the Pulsar backend's dead_letter_publishing.py, in memory)."""
        view = self.catalog.view
        entity = view.queues.get(queue)
        letter = None if entity is None else letter_for(message, entity, reason)
        if letter is None:
            return
        exchange = self.catalog.exchange(view, letter.message.exchange)
        if exchange is None:
            return  # a missing dead-letter exchange drops the message, as on RabbitMQ
        for name in self._route(exchange, letter.message):
            if reason == "rejected" or not letter.cycles(name):
                self._enqueue(name, letter.message)

    async def consume(
        self,
        command: cmd.BasicConsume,
        owner: Owner,
        *,
        prefetch: int = 0,
        qos: ConsumerQos = NO_QOS,
    ) -> QueueSubscription:
        queue, exclusive = command.queue, command.exclusive
        await self._expire_queues()
        entity = self.catalog.queue(self.catalog.view, queue, owner)
        self.catalog.check_consume(entity, command)
        stream = self._stream(queue)
        if stream is not None:
            where = resource("queue", queue, self.name)
            check_stream_consume(
                where,
                no_ack=command.no_ack,
                consumer_prefetch=qos.consumer,
                channel_prefetch=qos.channel,
            )
            spec = parse_offset(where, command.arguments.get("x-stream-offset"), now_ms())
            return MemoryStreamSubscription(
                stream, stream.start(spec), stream_filter(command.arguments), self._reader_gone
            )
        self._used(queue)
        target = self._messages(queue)
        where = resource("queue", queue, self.name)
        if target.single_active is not None:
            exclusive = False  # quorum queues ignore it (rabbit_quorum_queue:consume)
        if target.exclusive_consumer or (exclusive and target.subscriptions):
            raise ChannelError(ReplyCode.ACCESS_REFUSED, f"{where} in exclusive use")
        target.registered += 1
        subscription = MemorySubscription(
            target,
            self._consumer_gone,
            self._expire_all,
            priority=consumer_priority(command.arguments),
            credit=consumer_credit(0 if command.no_ack else qos.consumer),
            sequence=target.registered,
        )
        target.subscriptions.append(subscription)
        target.exclusive_consumer = exclusive
        target.rearrange()
        return subscription

    async def _reader_gone(self, _subscription: MemoryStreamSubscription) -> None:
        """A stream's consumer went: nothing to give back (streams have no auto-delete)."""

    async def _consumer_gone(self, queue: MemoryQueue) -> None:
        # An auto-delete queue goes when its last consumer does (having had at least one).
        self._used(queue.name)  # in use until now (x-expires)
        entity = self.catalog.view.queues.get(queue.name)
        if entity is not None and entity.auto_delete and not queue.subscriptions:
            await self._drop_queue(queue.name)

    def _used(self, name: str) -> None:
        self._last_used[name] = time.monotonic()

    async def _expire_queues(self) -> None:
        """Delete the queues unused (no consumer, no redeclare, no Basic.Get) for their
        ``x-expires`` (checked when the vhost is used: this backend has no timer)."""
        now = time.monotonic()
        for name, entity in list(self.catalog.view.queues.items()):
            expires = queue_expires(entity.arguments)
            if expires is None:
                continue
            queue = self._queues.get(name)
            if queue is not None and queue.subscriptions:
                self._used(name)
            elif now - self._last_used.setdefault(name, now) >= expires / 1000:
                self._last_used.pop(name, None)
                await self._drop_queue(name)

    def _expire_all(self) -> None:
        """Remove expired messages from every queue (this backend has no timer: it does so
        on each Basic.Get and Queue.Declare, which is when a test looks)."""
        for queue in list(self._queues.values()):
            queue.count()

    async def get(self, command: cmd.BasicGet, owner: Owner) -> tuple[MemoryDelivery, int] | None:
        queue = command.queue
        await self._expire_queues()
        self.catalog.check_get(self.catalog.queue(self.catalog.view, queue, owner))
        if self._stream(queue) is not None:
            raise refuse_get(resource("queue", queue, self.name))
        self._used(queue)
        self._expire_all()
        delivery = self._messages(queue).take()
        if delivery is None:
            return None
        return delivery, delivery.queue.count()

    async def release(self, owner: Owner) -> None:
        for name in self.catalog.owned_by(owner):
            await self._drop_queue(name)


class MemoryBackend:
    """Vhosts are created on first use, if their names map to a Pulsar namespace."""

    def __init__(self, mapper: VhostMapper | None = None) -> None:
        self._mapper = mapper or VhostMapper()
        self._store = MemoryMetadataStore()
        self._vhosts: dict[str, MemoryVirtualHost] = {}

    async def open_vhost(self, vhost: str, user: str) -> MemoryVirtualHost:
        namespace = str(self._mapper.namespace_for(vhost))
        if namespace not in self._vhosts:
            await self._store.open(namespace)
            self._vhosts[namespace] = MemoryVirtualHost(vhost, namespace, self._store)
        return self._vhosts[namespace]
