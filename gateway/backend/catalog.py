"""A vhost's exchanges, queues and bindings, with RabbitMQ's rules, over a metadata store.

Both backends keep their entities here and differ only in where messages live: the rules
(``gateway.model``), the lookups, the routers and the store's errors are written once.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Callable, Collection, Mapping
from collections.abc import Set as AbstractSet
from typing import TypeVar

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ChannelError, ReplyCode, amqp_error
from gateway.backend.interface import Message, Owner
from gateway.backend.replies import ReplyRegistry
from gateway.metadata.errors import ConditionNotMet, ConsumerConflict, MissingEntity
from gateway.metadata.store import (
    DrainRecord,
    MetadataStore,
    MetadataUnavailable,
    QueueCondition,
    VhostView,
)
from gateway.model.arguments import (
    check_consume_arguments,
    check_exchange_arguments,
    check_queue_arguments,
    queue_type_named,
)
from gateway.model.consumers import refuse_exclusive, single_active
from gateway.model.consumers import refuse_get as refuse_single_active_get
from gateway.model.entities import (
    DEFAULT_EXCHANGE,
    PREDECLARED_EXCHANGES,
    Binding,
    Exchange,
    ExchangeBinding,
    ExchangeType,
    Queue,
    binding_for,
    check_bind,
    check_equivalent,
    check_exchange_bind,
    check_exchange_declare,
    check_exchange_delete,
    check_exclusive_access,
    declared_exchange,
    declared_queue,
    exchange_binding_for,
    not_found,
    resource,
)
from gateway.model.graph import Route, RoutingGraph
from gateway.model.routing import Router, validate_binding

T = TypeVar("T")

_PREDECLARED = {exchange.name: exchange for exchange in PREDECLARED_EXCHANGES}


class Catalog:
    def __init__(
        self,
        vhost: str,
        namespace: str,
        store: MetadataStore,
        refused_arguments: Mapping[str, str] | None = None,
    ) -> None:
        self.vhost = vhost
        # Queue arguments this backend does not implement (check_queue_arguments).
        self._refused_arguments = refused_arguments
        self.namespace = namespace
        self._store = store
        self._routers: dict[str, tuple[AbstractSet[Binding], Exchange, Router]] = {}
        self._graph: tuple[tuple[object, ...], RoutingGraph] | None = None

    @property
    def view(self) -> VhostView:
        return self._store.view(self.namespace)

    @property
    def store(self) -> MetadataStore:
        return self._store

    async def write(self, change: Awaitable[T]) -> T:
        """Run a store write; its failures become what a RabbitMQ client expects
        (``ConditionNotMet`` is the caller's to answer)."""
        try:
            return await change
        except MissingEntity as missing:
            # Deleted meanwhile, perhaps on another replica: as if it had never been there.
            raise not_found(missing.kind, missing.name, self.vhost) from None
        except ConsumerConflict as conflict:
            raise self.exclusive_use(conflict.queue) from None
        except MetadataUnavailable as error:
            raise amqp_error(
                ReplyCode.INTERNAL_ERROR, f"metadata store unavailable, try again: {error}"
            ) from None

    def exclusive_use(self, queue: str) -> ChannelError:
        """RabbitMQ's answer to a consumer that cannot share the queue (rabbit_amqqueue
        basic_consume: an exclusive consumer exists, or one was asked for among others)."""
        return ChannelError(
            ReplyCode.ACCESS_REFUSED, f"{resource('queue', queue, self.vhost)} in exclusive use"
        )

    def in_use(self, kind: str, name: str) -> ChannelError:
        return ChannelError(
            ReplyCode.PRECONDITION_FAILED, f"{resource(kind, name, self.vhost)} in use"
        )

    # ------------------------------------------------------------------ lookups

    def exchange(self, view: VhostView, name: str) -> Exchange | None:
        return view.exchanges.get(name) or _PREDECLARED.get(name)

    def require_exchange(self, view: VhostView, name: str) -> Exchange:
        exchange = self.exchange(view, name)
        if exchange is None:
            raise not_found("exchange", name, self.vhost)
        return exchange

    def check_consume(self, queue: Queue, command: cmd.BasicConsume) -> None:
        """Basic.Consume's arguments, for ``queue`` (406 for what is not implemented); an
        exclusive consumer of a classic single-active-consumer queue (403)."""
        where = resource("queue", queue.name, self.vhost)
        if command.arguments:
            check_consume_arguments(where, queue.arguments, command.arguments)
        if (
            command.exclusive
            and single_active(queue.arguments)
            and queue_type_named(queue.arguments) == "classic"
        ):
            raise refuse_exclusive(where)

    def check_get(self, queue: Queue) -> None:
        """Basic.Get on a quorum single-active-consumer queue (405)."""
        if single_active(queue.arguments) and queue_type_named(queue.arguments) == "quorum":
            raise refuse_single_active_get(resource("queue", queue.name, self.vhost))

    def queue(self, view: VhostView, name: str, owner: Owner) -> Queue:
        """The queue, if it exists (404) and ``owner`` may use it (405)."""
        queue = view.queues.get(name)
        if queue is None:
            raise not_found("queue", name, self.vhost)
        check_exclusive_access(queue, owner.connection_id, self.vhost)
        return queue

    # A replica learns of another's change through a ZooKeeper watch, milliseconds later: a
    # name missing from the view is looked up in the store (after a sync) before the answer
    # is 404, so that a queue declared on one replica can be used on another at once. Only a
    # miss costs a round trip. Without ZooKeeper the view's answer stands.

    async def _synced(self, lookup: Awaitable[T]) -> T | None:
        try:
            return await lookup
        except MetadataUnavailable:
            return None

    async def find_queue(self, name: str, owner: Owner) -> Queue:
        """The queue (404, after asking the store on a miss) if ``owner`` may use it (405)."""
        queue = self.view.queues.get(name)
        if queue is None:
            queue = await self._synced(self._store.sync_queue(self.namespace, name))
            if queue is None:
                raise not_found("queue", name, self.vhost)
        check_exclusive_access(queue, owner.connection_id, self.vhost)
        return queue

    async def has_queue(self, name: str) -> bool:
        """Whether the queue exists (asking the store on a miss)."""
        return name in self.view.queues or (
            await self._synced(self._store.sync_queue(self.namespace, name)) is not None
        )

    async def find_exchange(self, name: str) -> Exchange | None:
        """The exchange, or None (after asking the store on a miss)."""
        exchange = self.exchange(self.view, name)
        if exchange is None:
            exchange = await self._synced(self._store.sync_exchange(self.namespace, name))
        return exchange

    async def require_fresh_exchange(self, name: str) -> Exchange:
        exchange = await self.find_exchange(name)
        if exchange is None:
            raise not_found("exchange", name, self.vhost)
        return exchange

    def router(self, view: VhostView, exchange: Exchange) -> Router:
        # Kept while the view's bindings and the exchange are the same objects (a view keeps
        # a part's object until that part changes): consumers coming and going leave it.
        cached = self._routers.get(exchange.name)
        if cached is not None and cached[0] is view.bindings and cached[1] is exchange:
            return cached[2]
        router = Router(exchange.type, [b for b in view.bindings if b.exchange == exchange.name])
        if view.version >= 0:  # not a view made up to see a change's effect (version -1)
            self._routers[exchange.name] = (view.bindings, exchange, router)
        return router

    def publish_target(self, view: VhostView, name: str) -> Exchange:
        """The exchange a Basic.Publish names: 404 if missing, 403 if internal."""
        return self.check_publishable(self.require_exchange(view, name))

    def check_publishable(self, exchange: Exchange) -> Exchange:
        """403 for an internal exchange."""
        if exchange.internal:
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"cannot publish to internal {resource('exchange', exchange.name, self.vhost)}",
            )
        return exchange

    def alternate(self, view: VhostView, exchange: Exchange) -> Exchange | None:
        """The exchange named by ``exchange``'s ``alternate-exchange`` argument, if it
        exists (RabbitMQ: unroutable messages go there; a missing one routes nothing)."""
        named = exchange.arguments.get("alternate-exchange")
        if named is None or named.kind != "S":
            return None
        value = named.value
        name = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
        return self.exchange(view, name)

    def routes(self, view: VhostView, exchange: Exchange, message: Message) -> set[str]:
        """The queues ``exchange``'s own queue bindings route ``message`` to in this view
        (no exchange binding, no alternate exchange: ``route`` follows those)."""
        key = message.routing_key
        if exchange.name == DEFAULT_EXCHANGE:
            return {key} if key in view.queues else set()
        headers = message.properties.headers if exchange.type is ExchangeType.HEADERS else None
        return self.router(view, exchange).route(key, headers)

    def graph(self, view: VhostView) -> RoutingGraph:
        """The view's exchanges with their bindings, for routing through exchange bindings
        (built again when one of those parts of the view changed; what it learns while
        routing, it keeps until then)."""
        parts = (view.exchanges, view.bindings, view.exchange_bindings, view.queues)
        cached = self._graph
        if cached is not None and all(map(operator.is_, cached[0], parts)):
            return cached[1]
        graph = RoutingGraph(
            lambda name: self.exchange(view, name),
            lambda exchange: self.router(view, exchange),
            view.exchange_bindings,
            view.queues,
        )
        if view.version >= 0:
            self._graph = (parts, graph)
        return graph

    def route(
        self,
        view: VhostView,
        exchange: Exchange,
        message: Message,
        *,
        matching: Collection[str] = (),
    ) -> Route:
        """RabbitMQ's routing of ``message`` published to ``exchange`` in this view: through
        exchange bindings and alternate exchanges (``matching``: exchanges to take as
        routing it, whatever the view says)."""
        return self.graph(view).route(
            exchange,
            message.routing_key,
            lambda: message.properties.headers,  # decoded if a headers exchange looks
            alternate=lambda unmatched: self.alternate(view, unmatched),
            matching=matching,
        )

    def destinations(self, view: VhostView, exchange: Exchange, message: Message) -> set[str]:
        """The queues RabbitMQ routes ``message`` to from ``exchange`` (exchange bindings and
        alternate exchanges followed)."""
        if view.exchange_bindings:
            return set(self.route(view, exchange, message).queues)
        # Without exchange bindings the walk is the exchange, then its alternates until one
        # routes (each exchange once): no graph needed.
        names = self.routes(view, exchange, message)
        seen = {exchange.name}
        while not names:
            alternate = self.alternate(view, exchange)
            if alternate is None or alternate.name in seen:
                break
            exchange = alternate
            seen.add(exchange.name)
            names = self.routes(view, exchange, message)
        return names

    # ------------------------------------------------------------------ exchanges

    async def declare_exchange(self, command: cmd.ExchangeDeclare) -> None:
        name, passive = command.exchange, command.passive
        existing = self.exchange(self.view, name)
        if existing is None and passive:
            existing = await self.find_exchange(name)
        check_exchange_declare(name, passive=passive, exists=existing is not None)
        if passive:
            if existing is None:
                raise not_found("exchange", name, self.vhost)
            return
        requested = declared_exchange(command)
        if existing is None:
            check_exchange_arguments(resource("exchange", name, self.vhost), command.arguments)
            existing = await self.write(self._store.create_exchange(self.namespace, requested))
        check_equivalent(existing, requested, vhost=self.vhost)

    async def exchange_bindings(self, command: cmd.ExchangeDelete) -> list[Binding] | None:
        """The bindings an Exchange.Delete would take with it (None: there is no such
        exchange, the delete is a no-op), after RabbitMQ's checks."""
        name, if_unused = command.exchange, command.if_unused
        check_exchange_delete(name, self.vhost)
        if name not in self.view.exchanges and await self.find_exchange(name) is None:
            return None
        view = self.view
        bindings = [b for b in view.bindings if b.exchange == name]
        # RabbitMQ's if-unused counts the bindings it is the source of, to queues or to
        # exchanges (has_for_source); those it is the destination of go with it.
        if if_unused and (bindings or any(e.source == name for e in view.exchange_bindings)):
            raise self.in_use("exchange", name)
        return bindings

    async def delete_exchange(
        self,
        command: cmd.ExchangeDelete,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> list[Binding]:
        """Delete it (idempotent); returns the bindings that went with it. ``if_unused`` is
        checked by the store too: a binding made on another replica counts."""
        name, if_unused = command.exchange, command.if_unused
        bindings = await self.exchange_bindings(command)
        if bindings is None:
            return []
        sources = {e.source for e in self.view.exchange_bindings if e.destination == name}
        try:
            await self.write(
                self._store.delete_exchange(
                    self.namespace, name, if_unused=if_unused, drains=drains
                )
            )
        except ConditionNotMet:
            raise self.in_use("exchange", name) from None
        # Its bindings from other exchanges went with it: those may be auto-delete exchanges
        # left with no binding (rabbit_binding:maybe_auto_delete on the removed ones).
        for source in sorted(sources - {name}):
            await self._auto_delete(source)
        return bindings

    # ------------------------------------------------------------------ queues

    async def declare_queue(
        self,
        command: cmd.QueueDeclare,
        owner: Owner,
        before_create: Callable[[], Awaitable[None]] | None = None,
    ) -> tuple[Queue, bool]:
        """The queue, and whether this call created it. ``before_create`` runs before a new
        queue becomes visible (so its storage exists before anyone can route to it)."""
        name = command.queue
        view = self.view
        if command.passive:
            return await self.find_queue(name, owner), False
        requested = declared_queue(command, owner.connection_id)
        check_queue_arguments(
            resource("queue", name, self.vhost),
            command.arguments,
            durable=requested.durable,
            exclusive=requested.exclusive,
            auto_delete=requested.auto_delete,
            backend_refuses=self._refused_arguments,
        )
        existing = view.queues.get(name)
        if existing is None:
            if before_create is not None:
                await before_create()
            existing = await self.write(self._store.create_queue(self.namespace, requested))
            if existing == requested:
                return existing, True
        check_exclusive_access(existing, owner.connection_id, self.vhost)
        check_equivalent(existing, requested, vhost=self.vhost)
        return existing, False

    async def delete_queue(
        self,
        name: str,
        *,
        condition: QueueCondition | None = None,
        subscriptions: Collection[str] = (),
    ) -> bool:
        """Delete it and its bindings; auto-delete exchanges left without any go too. False
        if it was not there; ``ConditionNotMet`` (the caller's to answer) if ``condition``
        does not hold. ``subscriptions``: see ``MetadataStore.delete_queue``."""
        bound_to = {b.exchange for b in self.view.queue_bindings.get(name, ())}
        deleted = await self.write(
            self._store.delete_queue(
                self.namespace, name, condition=condition, subscriptions=subscriptions
            )
        )
        for exchange in bound_to:
            await self._auto_delete(exchange)
        return deleted

    def owned_by(self, owner: Owner) -> list[str]:
        """The exclusive queues of ``owner``'s connection."""
        return [q.name for q in self.view.queues.values() if q.owner == owner.connection_id]

    # ------------------------------------------------------------------ bindings

    async def binding(self, command: cmd.QueueBind, owner: Owner) -> tuple[Binding, Exchange]:
        """The binding a Queue.Bind asks for, after every check RabbitMQ makes."""
        check_bind(command.exchange)
        await self.find_queue(command.queue, owner)
        target = await self.require_fresh_exchange(command.exchange)
        validate_binding(target.type, command.arguments)
        return binding_for(command), target

    async def register_topic_key(self, exchange: str, routing_key: str) -> None:
        """Record that a topic exchange's key has a topic (before its first message)."""
        await self.write(self._store.register_topic_key(self.namespace, exchange, routing_key))

    async def add_binding(
        self, binding: Binding, *, drains: Mapping[str, DrainRecord] | None = None
    ) -> None:
        await self.write(self._store.add_binding(self.namespace, binding, drains=drains))

    async def unbinding(self, command: cmd.QueueUnbind, owner: Owner) -> Binding | None:
        """The binding a Queue.Unbind removes, after RabbitMQ's checks; None when it is not
        there (Queue.Unbind is idempotent). One this replica has not seen yet, made on
        another, is returned when its queue and exchange exist: the store decides."""
        queue, exchange = command.queue, command.exchange
        check_bind(exchange)
        binding = binding_for(command)
        view = self.view
        if queue in view.queues:
            self.queue(view, queue, owner)
            if binding in view.bindings:
                return binding
        elif not await self.has_queue(queue):
            return None
        else:
            await self.find_queue(queue, owner)  # 405 for another connection's queue
        if await self.find_exchange(exchange) is None:
            return None
        return binding

    async def remove_binding(
        self, binding: Binding, *, drains: Mapping[str, DrainRecord] | None = None
    ) -> bool:
        """Remove it (False if it was gone already). An auto-delete exchange goes with its
        last binding, as in RabbitMQ."""
        removed = await self.write(
            self._store.remove_binding(self.namespace, binding, drains=drains)
        )
        await self._auto_delete(binding.exchange)
        return removed

    async def _auto_delete(self, exchange: str) -> None:
        """Delete an auto-delete exchange that is the source of no binding any more (to a
        queue or to an exchange: RabbitMQ's rule; exchange bindings it is the destination
        of go with it, and their sources may then go too). The store decides (this
        replica's view may miss a binding made elsewhere, or still show one removed
        elsewhere), so it is asked whenever a binding of such an exchange went."""
        view = self.view
        target = view.exchanges.get(exchange)
        if target is None or not target.auto_delete:
            return
        sources = {e.source for e in view.exchange_bindings if e.destination == exchange}
        try:
            deleted = await self.write(
                self._store.delete_exchange(self.namespace, exchange, if_unused=True)
            )
        except ConditionNotMet:  # a binding remains, on some replica
            return
        if deleted:
            for source in sorted(sources - {exchange}):
                await self._auto_delete(source)

    # ------------------------------------------------------------------ exchange bindings

    async def exchange_binding(self, command: cmd.ExchangeBind) -> ExchangeBinding:
        """The binding an Exchange.Bind asks for, after RabbitMQ's checks: the default
        exchange at either end (403), a missing source, then destination (404), the source
        type's binding arguments (406)."""
        check_exchange_bind(command.destination, command.source)
        source = await self.require_fresh_exchange(command.source)
        await self.require_fresh_exchange(command.destination)
        validate_binding(source.type, command.arguments)
        return exchange_binding_for(command)

    async def add_exchange_binding(
        self,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        return await self.write(
            self._store.add_exchange_binding(self.namespace, binding, drains=drains)
        )

    async def exchange_unbinding(self, command: cmd.ExchangeUnbind) -> ExchangeBinding | None:
        """The binding an Exchange.Unbind removes; None when it is not there (idempotent,
        also when an exchange is missing: RabbitMQ's remove ignores those). One this replica
        has not seen yet, made on another, is returned when both exchanges exist: the store
        decides."""
        check_exchange_bind(command.destination, command.source)
        binding = exchange_binding_for(command)
        if binding in self.view.exchange_bindings:
            return binding
        for name in (command.source, command.destination):
            if await self.find_exchange(name) is None:
                return None
        return binding

    async def remove_exchange_binding(
        self,
        binding: ExchangeBinding,
        *,
        drains: Mapping[tuple[str, str], DrainRecord] | None = None,
    ) -> bool:
        """Remove it (False if it was gone already); an auto-delete source exchange goes
        with the last binding it is the source of, as in RabbitMQ."""
        removed = await self.write(
            self._store.remove_exchange_binding(self.namespace, binding, drains=drains)
        )
        await self._auto_delete(binding.source)
        return removed


class CatalogVirtualHost:
    """Base of both backends' vhosts: operations that are the catalog's alone."""

    catalog: Catalog
    replies: ReplyRegistry

    async def declare_exchange(self, command: cmd.ExchangeDeclare) -> None:
        await self.catalog.declare_exchange(command)

    async def send_reply(self, message: Message) -> None:
        await self.replies.send(message.routing_key, message)

    async def delete_exchange(self, command: cmd.ExchangeDelete) -> None:
        await self.catalog.delete_exchange(command)
