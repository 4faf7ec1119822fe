"""A vhost's exchanges, queues and bindings, with RabbitMQ's rules, over a metadata store.

Both backends keep their entities here and differ only in where messages live: the rules
(``gateway.model``), the lookups, the routers and the store's errors are written once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from gateway.amqp.errors import ChannelError, ReplyCode, amqp_error
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import Message, Owner
from gateway.metadata.errors import MissingEntity
from gateway.metadata.store import MetadataStore, MetadataUnavailable, VhostView
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

T = TypeVar("T")

_PREDECLARED = {exchange.name: exchange for exchange in PREDECLARED_EXCHANGES}


class Catalog:
    def __init__(self, vhost: str, namespace: str, store: MetadataStore) -> None:
        self.vhost = vhost
        self.namespace = namespace
        self._store = store
        self._routers: dict[str, tuple[int, Router]] = {}

    @property
    def view(self) -> VhostView:
        return self._store.view(self.namespace)

    async def write(self, change: Awaitable[T]) -> T:
        """Run a store write; its failures become what a RabbitMQ client expects."""
        try:
            return await change
        except MissingEntity as missing:
            # Deleted meanwhile, perhaps on another replica: as if it had never been there.
            raise not_found(missing.kind, missing.name, self.vhost) from None
        except MetadataUnavailable as error:
            raise amqp_error(
                ReplyCode.INTERNAL_ERROR, f"metadata store unavailable, try again: {error}"
            ) from None

    # ------------------------------------------------------------------ lookups

    def exchange(self, view: VhostView, name: str) -> Exchange | None:
        return view.exchanges.get(name) or _PREDECLARED.get(name)

    def require_exchange(self, view: VhostView, name: str) -> Exchange:
        exchange = self.exchange(view, name)
        if exchange is None:
            raise not_found("exchange", name, self.vhost)
        return exchange

    def queue(self, view: VhostView, name: str, owner: Owner) -> Queue:
        """The queue, if it exists (404) and ``owner`` may use it (405)."""
        queue = view.queues.get(name)
        if queue is None:
            raise not_found("queue", name, self.vhost)
        check_exclusive_access(queue, owner.connection_id, self.vhost)
        return queue

    def router(self, view: VhostView, exchange: Exchange) -> Router:
        cached = self._routers.get(exchange.name)
        if cached is not None and cached[0] == view.version:
            return cached[1]
        router = Router(exchange.type, [b for b in view.bindings if b.exchange == exchange.name])
        self._routers[exchange.name] = (view.version, router)
        return router

    def publish_target(self, view: VhostView, name: str) -> Exchange:
        """The exchange a Basic.Publish names: 404 if missing, 403 if internal."""
        exchange = self.require_exchange(view, name)
        if exchange.internal:
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"cannot publish to internal {resource('exchange', exchange.name, self.vhost)}",
            )
        return exchange

    def routes(self, view: VhostView, exchange: Exchange, message: Message) -> set[str]:
        """The queues ``message`` reaches through ``exchange`` in this view."""
        key = message.routing_key
        if exchange.name == DEFAULT_EXCHANGE:
            return {key} if key in view.queues else set()
        headers = message.properties.headers if exchange.type is ExchangeType.HEADERS else None
        return self.router(view, exchange).route(key, headers)

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
        existing = self.exchange(self.view, name)
        check_exchange_declare(name, passive=passive, exists=existing is not None)
        if passive:
            if existing is None:
                raise not_found("exchange", name, self.vhost)
            return
        requested = Exchange(
            name, ExchangeType.parse(type), durable, auto_delete, internal, arguments
        )
        if existing is None:
            existing = await self.write(self._store.create_exchange(self.namespace, requested))
        check_equivalent(existing, requested, vhost=self.vhost)

    async def delete_exchange(self, name: str, *, if_unused: bool) -> list[Binding]:
        """Delete it (idempotent); returns the bindings that went with it."""
        check_exchange_delete(name, self.vhost)
        view = self.view
        if name not in view.exchanges:
            return []
        bindings = [b for b in view.bindings if b.exchange == name]
        if if_unused and bindings:
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED, f"{resource('exchange', name, self.vhost)} in use"
            )
        await self.write(self._store.delete_exchange(self.namespace, name))
        return bindings

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
        before_create: Callable[[], Awaitable[None]] | None = None,
    ) -> tuple[Queue, bool]:
        """The queue, and whether this call created it. ``before_create`` runs before a new
        queue becomes visible (so its storage exists before anyone can route to it)."""
        view = self.view
        if passive:
            return self.queue(view, name, owner), False
        requested = declared_queue(
            name,
            durable=durable,
            exclusive=exclusive,
            auto_delete=auto_delete,
            arguments=arguments,
            connection=owner.connection_id,
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

    async def delete_queue(self, name: str) -> None:
        """Delete it and its bindings; auto-delete exchanges left without any go too."""
        bound_to = {b.exchange for b in self.view.bindings if b.queue == name}
        await self.write(self._store.delete_queue(self.namespace, name))
        for exchange in bound_to:
            await self._auto_delete(exchange)

    def owned_by(self, owner: Owner) -> list[str]:
        """The exclusive queues of ``owner``'s connection."""
        return [q.name for q in self.view.queues.values() if q.owner == owner.connection_id]

    # ------------------------------------------------------------------ bindings

    def binding(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Field],
        owner: Owner,
    ) -> tuple[Binding, Exchange]:
        """The binding a Queue.Bind asks for, after every check RabbitMQ makes."""
        check_bind(exchange)
        view = self.view
        self.queue(view, queue, owner)
        target = self.require_exchange(view, exchange)
        validate_binding(target.type, arguments)
        return Binding(queue, exchange, routing_key, arguments), target

    async def register_topic_key(self, exchange: str, routing_key: str) -> None:
        """Record that a topic exchange's key has a topic (before its first message)."""
        await self.write(self._store.register_topic_key(self.namespace, exchange, routing_key))

    async def add_binding(self, binding: Binding) -> None:
        await self.write(self._store.add_binding(self.namespace, binding))

    async def remove_binding(
        self,
        queue: str,
        exchange: str,
        routing_key: str,
        arguments: Mapping[str, Field],
        owner: Owner,
    ) -> Binding | None:
        """Remove it (idempotent: None if it was not there). An auto-delete exchange goes with
        its last binding, as in RabbitMQ."""
        check_bind(exchange)
        view = self.view
        if queue in view.queues:
            self.queue(view, queue, owner)
        binding = Binding(queue, exchange, routing_key, arguments)
        if binding not in view.bindings:
            return None
        await self.write(self._store.remove_binding(self.namespace, binding))
        await self._auto_delete(exchange)
        return binding

    async def _auto_delete(self, exchange: str) -> None:
        view = self.view
        target = view.exchanges.get(exchange)
        if (
            target is not None
            and target.auto_delete
            and not any(b.exchange == exchange for b in view.bindings)
        ):
            await self.write(self._store.delete_exchange(self.namespace, exchange))


class CatalogVirtualHost:
    """Base of both backends' vhosts: operations that are the catalog's alone."""

    catalog: Catalog

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
        await self.catalog.declare_exchange(
            name,
            type,
            passive=passive,
            durable=durable,
            auto_delete=auto_delete,
            internal=internal,
            arguments=arguments,
        )

    async def delete_exchange(self, name: str, *, if_unused: bool) -> None:
        await self.catalog.delete_exchange(name, if_unused=if_unused)
