"""What the management API's handlers work with: one ``Context`` per replica, one ``Call`` per
request, and the lookups every resource needs (a vhost that exists, the backend a user's
writes go through, this replica's and the fleet's connections)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.amqp.errors import AMQPError
from gateway.backend.interface import Backend, Owner, VirtualHost
from gateway.backend.pulsar.backend import PulsarBackend
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.backend.vhost_admin import (
    VhostAdmin,
    VhostError,
    VhostInfo,
    VhostInvalid,
    VhostNotFound,
)
from gateway.management.errors import ApiError, bad_request, from_amqp, not_found, unavailable
from gateway.management.http import Request
from gateway.management.users import User, Users
from gateway.metadata.connections import ConnectionDirectory, ConsumerGroup
from gateway.metadata.store import MetadataStore, MetadataUnavailable
from gateway.model.entities import Exchange, Queue, check_queue_declare
from gateway.model.vhost import Namespace
from gateway.pulsar.admin import PulsarAdmin

__all__ = ["Call", "Context", "LocalConnections"]


class LocalConnections(Protocol):
    """This replica's AMQP connections (gateway/server/connection_info.py)."""

    def records(self) -> dict[str, Mapping[str, Any]]: ...

    def consumers(self) -> dict[str, ConsumerGroup]: ...

    async def close(self, connection_id: str, reason: str) -> bool: ...


@dataclass
class Context:
    """One replica's management API: what it answers from and acts on."""

    node: str
    cluster: str
    product_version: str
    gateway_version: str
    users: Users
    vhosts: VhostAdmin
    store: MetadataStore
    backend: PulsarBackend  # reads: counts, views
    admin: PulsarAdmin
    # The backend a user's writes go through: the authorizing one for a management user.
    backend_for: Callable[[User], Backend]
    local: LocalConnections
    directory: ConnectionDirectory | None
    replica: str
    started_ms: int
    listeners: list[dict[str, Any]] = field(default_factory=list)
    # Readiness of this replica (health checks): (ready, what is not).
    readiness: Callable[[], Awaitable[tuple[bool, str]]] | None = None


@dataclass
class Call:
    """One request being answered."""

    context: Context
    request: Request
    user: User
    params: dict[str, str]

    @property
    def query(self) -> dict[str, str]:
        return self.request.query

    def owner(self) -> Owner:
        # Management operations run on no AMQP connection; an id of their own keeps them
        # from ever owning (or being refused as the owner of) an exclusive queue.
        return Owner(f"management-{self.context.replica}", self.user.name)

    def body(self) -> dict[str, Any]:
        """The JSON object of the request body; ``{}`` for none (as RabbitMQ)."""
        if not self.request.body.strip():
            return {}
        try:
            data = json.loads(self.request.body)
        except (ValueError, UnicodeDecodeError):
            raise bad_request("not_json") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise bad_request("not_json")
        return data

    async def namespace(self, vhost: str, *, writing: bool = False) -> Namespace:
        """The namespace of an existing vhost the user may use; 404 (``vhost_not_found``
        for a write, as ``with_vhost_and_props``) or 401 otherwise."""
        vhosts = self.context.vhosts
        if not vhost:
            # An empty segment (``/api/queues//``) names no vhost on RabbitMQ (cowboy binds
            # it as ``""``, which ``rabbit_vhost:exists`` denies), though an AMQP client's
            # empty vhost is the default one here.
            raise ApiError(404, "not_found", "vhost_not_found") if writing else not_found()
        try:
            namespace = await vhosts.exists(vhost)
        except VhostInvalid:
            namespace = None
        except VhostNotFound:
            namespace = None
        except VhostError as error:
            raise unavailable(error) from None
        if namespace is None:
            if writing:
                raise ApiError(404, "not_found", "vhost_not_found")
            raise not_found()
        self.context.users.require_use(self.user, namespace)
        return namespace

    async def pulsar_vhost(self, vhost: str) -> PulsarVirtualHost:
        """The vhost as this replica has it open (for reads: views and counts)."""
        try:
            return await self.context.backend.open_vhost(vhost, self.user.name)
        except AMQPError as error:
            raise from_amqp(error) from None
        except MetadataUnavailable as error:
            raise unavailable(error) from None

    async def named_vhost(
        self, *, writing: bool = False
    ) -> tuple[Namespace, str, PulsarVirtualHost]:
        """The vhost the path names (404 or 401 as :meth:`namespace` says): its namespace, its
        name and this replica's handle on it."""
        namespace = await self.namespace(self.params["vhost"], writing=writing)
        vhost = self.vhost_name(namespace)
        return namespace, vhost, await self.pulsar_vhost(vhost)

    async def exchange_in(
        self, namespace: Namespace, handle: PulsarVirtualHost, name: str
    ) -> Exchange | None:
        """The exchange as this replica's view has it, else as the store has it now."""
        found = handle.catalog.exchange(handle.catalog.view, name)
        if found is None:
            # Declared on another replica a moment ago, perhaps (docs/fleet.md).
            found = await amqp(self.context.store.sync_exchange(str(namespace), name))
        return found

    async def queue_in(
        self, namespace: Namespace, handle: PulsarVirtualHost, name: str
    ) -> Queue | None:
        """The queue as this replica's view has it, else as the store has it now."""
        found = handle.catalog.view.queues.get(name)
        if found is None:
            # Declared on another replica a moment ago, perhaps (docs/fleet.md).
            found = await amqp(self.context.store.sync_queue(str(namespace), name))
        return found

    async def vhost_for_writes(self, vhost: str) -> VirtualHost:
        """The vhost through the backend this user's writes go through."""
        try:
            return await self.context.backend_for(self.user).open_vhost(vhost, self.user.name)
        except AMQPError as error:
            raise from_amqp(error) from None

    async def all_vhosts(self) -> list[VhostInfo]:
        try:
            return await self.context.vhosts.list()
        except VhostError as error:
            raise unavailable(error) from None

    async def usable_vhosts(self) -> list[VhostInfo]:
        """The vhosts whose resources this user may list (RabbitMQ's ``filter_vhost``)."""
        users = self.context.users
        return [
            info for info in await self.all_vhosts() if users.may_use(self.user, info.namespace)
        ]

    def vhost_name(self, namespace: Namespace) -> str:
        return self.context.vhosts.name_of(namespace)

    async def listed_vhosts(self) -> list[tuple[str, Namespace]]:
        """The vhosts a listing covers, with their namespaces: the one the path names, or
        every one the user may use."""
        if "vhost" in self.params:
            namespace = await self.namespace(self.params["vhost"])
            return [(self.vhost_name(namespace), namespace)]
        return [(info.name, info.namespace) for info in await self.usable_vhosts()]


async def amqp(operation: Awaitable[Any]) -> Any:
    """Run a backend operation; its refusal becomes RabbitMQ's HTTP answer."""
    try:
        return await operation
    except AMQPError as error:
        raise from_amqp(error) from None
    except MetadataUnavailable as error:
        raise unavailable(error) from None


def check_name(queue: str) -> None:
    """Queue.Declare's name rule (``amq.`` is reserved: 403, "Access refused." over HTTP)."""
    try:
        check_queue_declare(queue, passive=False)
    except AMQPError as error:
        raise from_amqp(error) from None
