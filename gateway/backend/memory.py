"""An in-process backend: exchanges, queues, bindings and messages in memory.

It answers the ``VirtualHost`` interface with RabbitMQ's semantics (the rules themselves come
from ``gateway.model``), so the channel logic can be tested without Pulsar or ZooKeeper, and
the same behavioural tests can later be run against the real backend. Nothing is durable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import trio

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import (
    Message,
    Owner,
    PublishOutcome,
    QueueStatus,
    SubscriptionEnded,
)
from gateway.model.entities import (
    DEFAULT_EXCHANGE,
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeType,
    Queue,
    check_bind,
    check_equivalent,
    check_exchange_declare,
    check_exchange_delete,
    check_exclusive_access,
    declared_queue,
    not_found,
    resource,
)
from gateway.model.routing import Router, validate_binding
from gateway.model.vhost import VhostMapper


@dataclass(eq=False)
class MemoryDelivery:
    queue: MemoryQueue
    message: Message
    redelivered: bool
    settled: bool = False

    async def ack(self) -> None:
        self.settled = True

    async def reject(self, requeue: bool) -> None:
        if self.settled:
            return
        self.settled = True
        if requeue:
            self.queue.requeue(self.message)


@dataclass(eq=False)
class MemoryQueue:
    entity: Queue
    ready: deque[tuple[Message, bool]] = field(default_factory=deque)
    subscriptions: list[MemorySubscription] = field(default_factory=list)
    exclusive_consumer: bool = False
    deleted: bool = False
    changed: trio.Event = field(default_factory=trio.Event)

    def _signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def push(self, message: Message) -> None:
        self.ready.append((message, False))
        self._signal()

    def requeue(self, message: Message) -> None:
        if not self.deleted:
            # RabbitMQ puts a requeued message back near its original position: the front.
            self.ready.appendleft((message, True))
            self._signal()

    def take(self) -> MemoryDelivery | None:
        if not self.ready:
            return None
        message, redelivered = self.ready.popleft()
        return MemoryDelivery(self, message, redelivered)

    def delete(self) -> None:
        self.deleted = True
        self.ready.clear()
        self._signal()


@dataclass(eq=False)
class MemorySubscription:
    queue: MemoryQueue
    on_closed: Callable[[MemoryQueue], None]
    outstanding: list[MemoryDelivery] = field(default_factory=list)
    closed: bool = False

    async def receive(self) -> MemoryDelivery:
        while True:
            if self.queue.deleted:
                raise SubscriptionEnded(self.queue.entity.name)
            delivery = self.queue.take()
            if delivery is not None:
                self.outstanding = [d for d in self.outstanding if not d.settled]
                self.outstanding.append(delivery)
                return delivery
            await self.queue.changed.wait()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for delivery in self.outstanding:
            await delivery.reject(requeue=True)
        self.outstanding.clear()
        self.queue.subscriptions.remove(self)
        self.queue.exclusive_consumer = False
        self.on_closed(self.queue)


class MemoryVirtualHost:
    def __init__(self, name: str) -> None:
        self.name = name
        self._exchanges: dict[str, Exchange] = {e.name: e for e in PREDECLARED_EXCHANGES}
        self._queues: dict[str, MemoryQueue] = {}
        self._routers: dict[str, Router] = {
            e.name: Router(e.type) for e in PREDECLARED_EXCHANGES if e.name != DEFAULT_EXCHANGE
        }

    # ------------------------------------------------------------------ lookups

    def _exchange(self, name: str) -> Exchange:
        exchange = self._exchanges.get(name)
        if exchange is None:
            raise not_found("exchange", name, self.name)
        return exchange

    def _queue(self, name: str, owner: Owner) -> MemoryQueue:
        queue = self._queues.get(name)
        if queue is None:
            raise not_found("queue", name, self.name)
        check_exclusive_access(queue.entity, owner.connection_id, self.name)
        return queue

    # ------------------------------------------------------------------ exchanges

    async def declare_exchange(
        self,
        name: str,
        type: str,
        *,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        arguments: Mapping[str, Any],
    ) -> None:
        existing = self._exchanges.get(name)
        check_exchange_declare(name, passive=passive, exists=existing is not None)
        if passive:
            self._exchange(name)
            return
        requested = Exchange(
            name, ExchangeType.parse(type), durable, auto_delete, internal, arguments
        )
        if existing is not None:
            check_equivalent(existing, requested, vhost=self.name)
            return
        self._exchanges[name] = requested
        self._routers[name] = Router(requested.type)

    async def delete_exchange(self, name: str, *, if_unused: bool) -> None:
        check_exchange_delete(name, self.name)
        if name not in self._exchanges:
            return  # idempotent, as in RabbitMQ
        if if_unused and self._routers[name].bindings:
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED, f"{resource('exchange', name, self.name)} in use"
            )
        del self._exchanges[name]
        del self._routers[name]

    # ------------------------------------------------------------------ queues

    async def declare_queue(
        self,
        name: str,
        *,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: Mapping[str, Any],
        owner: Owner,
    ) -> QueueStatus:
        if passive:
            queue = self._queue(name, owner)
        else:
            requested = declared_queue(
                name,
                durable=durable,
                exclusive=exclusive,
                auto_delete=auto_delete,
                arguments=arguments,
                connection=owner.connection_id,
            )
            existing = self._queues.get(name)
            if existing is None:
                queue = self._queues[name] = MemoryQueue(requested)
            else:
                check_exclusive_access(existing.entity, owner.connection_id, self.name)
                check_equivalent(existing.entity, requested, vhost=self.name)
                queue = existing
        return QueueStatus(name, len(queue.ready), len(queue.subscriptions))

    async def delete_queue(
        self, name: str, *, if_unused: bool, if_empty: bool, owner: Owner
    ) -> int:
        if name not in self._queues:
            return 0  # idempotent, as in RabbitMQ
        queue = self._queue(name, owner)
        where = resource("queue", name, self.name)
        if if_unused and queue.subscriptions:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"{where} in use")
        if if_empty and queue.ready:
            raise ChannelError(ReplyCode.PRECONDITION_FAILED, f"{where} is not empty")
        count = len(queue.ready)
        self._drop_queue(queue)
        return count

    def _drop_queue(self, queue: MemoryQueue) -> None:
        name = queue.entity.name
        del self._queues[name]
        queue.delete()
        for exchange, router in list(self._routers.items()):
            for binding in router.bindings:
                if binding.queue == name:
                    self._unbind(exchange, binding)

    async def purge_queue(self, name: str, *, owner: Owner) -> int:
        queue = self._queue(name, owner)
        count = len(queue.ready)
        queue.ready.clear()
        return count

    # ------------------------------------------------------------------ bindings

    async def bind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Field],
        *,
        owner: Owner,
    ) -> None:
        check_bind(exchange)
        self._queue(queue, owner)
        target = self._exchange(exchange)
        validate_binding(target.type, arguments)
        binding = Binding(queue, exchange, routing_key, arguments)
        self._routers[exchange] = self._routers[exchange].with_binding(binding)

    async def unbind_queue(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Field],
        *,
        owner: Owner,
    ) -> None:
        check_bind(exchange)
        if queue in self._queues:
            self._queue(queue, owner)
        if exchange in self._routers:
            self._unbind(exchange, Binding(queue, exchange, routing_key, arguments))

    def _unbind(self, exchange: str, binding: Binding) -> None:
        router = self._routers[exchange].without_binding(binding)
        self._routers[exchange] = router
        if not router.bindings and self._exchanges[exchange].auto_delete:
            del self._exchanges[exchange]
            del self._routers[exchange]

    # ------------------------------------------------------------------ messages

    async def publish(self, message: Message) -> PublishOutcome:
        exchange = self._exchange(message.exchange)
        if exchange.internal:
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"cannot publish to internal {resource('exchange', exchange.name, self.name)}",
            )
        if exchange.name == DEFAULT_EXCHANGE:
            names = {message.routing_key} if message.routing_key in self._queues else set()
        else:
            headers = None
            if exchange.type is ExchangeType.HEADERS:
                headers = message.properties.headers
            names = self._routers[exchange.name].route(message.routing_key, headers)
        for name in names:
            self._queues[name].push(message)
        return PublishOutcome(routed=bool(names))

    async def consume(self, queue: str, *, exclusive: bool, owner: Owner) -> MemorySubscription:
        target = self._queue(queue, owner)
        if target.exclusive_consumer or (exclusive and target.subscriptions):
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"{resource('queue', queue, self.name)} in exclusive use",
            )
        subscription = MemorySubscription(target, self._consumer_gone)
        target.subscriptions.append(subscription)
        target.exclusive_consumer = exclusive
        return subscription

    def _consumer_gone(self, queue: MemoryQueue) -> None:
        # An auto-delete queue goes when its last consumer does (having had at least one).
        if queue.entity.auto_delete and not queue.subscriptions and not queue.deleted:
            self._drop_queue(queue)

    async def get(self, queue: str, *, owner: Owner) -> tuple[MemoryDelivery, int] | None:
        delivery = self._queue(queue, owner).take()
        if delivery is None:
            return None
        return delivery, len(delivery.queue.ready)

    async def release(self, owner: Owner) -> None:
        for queue in list(self._queues.values()):
            if queue.entity.owner == owner.connection_id:
                self._drop_queue(queue)


class MemoryBackend:
    """Vhosts are created on first use, if their names map to a Pulsar namespace."""

    def __init__(self, mapper: VhostMapper | None = None) -> None:
        self._mapper = mapper or VhostMapper()
        self._vhosts: dict[str, MemoryVirtualHost] = {}

    async def open_vhost(self, vhost: str, user: str) -> MemoryVirtualHost:
        namespace = str(self._mapper.namespace_for(vhost))
        if namespace not in self._vhosts:
            self._vhosts[namespace] = MemoryVirtualHost(vhost)
        return self._vhosts[namespace]
