"""Vhost access and per-operation permissions, checked the way RabbitMQ checks them.

``AuthorizingBackend`` wraps any backend. At Connection.Open a principal needs an entry in the
permission store for the vhost (RabbitMQ's ``check_vhost_access``: any entry at all, even three
empty patterns), or it gets 530 NOT_ALLOWED; members of ``superUserRoles`` need none. Inside
the vhost each operation needs the access in RabbitMQ's table ("How Permissions Work",
https://www.rabbitmq.com/docs/access-control; the order of checks is rabbit_channel's):

=========================  =============  ===============  =============
operation                  configure      write            read
=========================  =============  ===============  =============
exchange.declare           exchange
  ... passive              (nothing)
  ... creating, with AE                   the AE           exchange
exchange.delete            exchange
queue.declare              queue
  ... passive              (nothing)
  ... creating, with DLX                  the DLX          queue
queue.delete               queue
queue.purge                                                queue
queue.bind / queue.unbind                 queue            exchange
exchange.bind / exchange.unbind           destination      source
basic.publish                             exchange
basic.consume / basic.get                                  queue
=========================  =============  ===============  =============

The default exchange ``""`` is named ``amq.default`` for matching (``rabbit_access_control``).
A refusal is 403 ACCESS_REFUSED on the channel with RabbitMQ's text,
``write access to exchange 'x' in vhost '/' refused for user 'u'``.

Permissions are looked up on every operation from the store's watched cache (a dict lookup),
and each entry memoises its decisions per name, so a publish pays two dict lookups; a change
made with ``starlight-rabbitmq permissions`` applies to the next operation of connections
already open.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

from gateway.amqp import commands as cmd
from gateway.amqp.errors import ChannelError, ConnectionException, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.backend.interface import (
    NO_QOS,
    Backend,
    ConsumerQos,
    Delivery,
    Message,
    Owner,
    PublishOutcome,
    QueueStatus,
    QueueSubscription,
    VirtualHost,
)
from gateway.metadata.permissions import (
    DEFAULT_PREFIX,
    Access,
    PermissionStore,
    ZooKeeperPermissionStore,
    serving_permissions,
)
from gateway.model.entities import resource
from gateway.model.vhost import VhostMapper

__all__ = [
    "AuthorizingBackend",
    "AuthorizingVirtualHost",
    "open_authorization",
    "permission_scope",
    "vhost_refused",
]

# Permission checks name the default exchange so (rabbit_access_control:check_resource_access).
DEFAULT_EXCHANGE_RESOURCE: Final = "amq.default"
_CONNECTION_OPEN: Final = (10, 40)
_RESERVED_PREFIX: Final = "amq."
# Exchange operations act for no connection (exchanges have no exclusive owner).
_NOBODY: Final = Owner("", "")


def permission_scope(mapper: VhostMapper, vhost: str) -> str:
    """The key under which a vhost's permissions are stored: its Pulsar namespace.

    ``/x`` and ``x`` (and ``/`` and ``""``) are one vhost here, so they share one set of
    permissions; raises ``InvalidVhost`` (530) for a name that maps to no namespace.
    """
    return str(mapper.namespace_for(vhost))


def vhost_refused(vhost: str, user: str) -> ConnectionException:
    # rabbit_access_control:check_vhost_access's wording, with its reply code (not_allowed).
    return ConnectionException(
        ReplyCode.NOT_ALLOWED,
        f"access to vhost '{vhost}' refused for user '{user}'",
        *_CONNECTION_OPEN,
    )


class AuthorizingBackend:
    """A ``Backend`` that lets a principal into a vhost, and do things there, only as its
    permissions allow."""

    def __init__(
        self,
        inner: Backend,
        store: PermissionStore,
        *,
        superusers: Iterable[str] = (),
        mapper: VhostMapper | None = None,
    ) -> None:
        self._inner = inner
        self._store = store
        self._superusers = frozenset(superusers)
        self._mapper = mapper or VhostMapper()

    @property
    def inner(self) -> Backend:
        return self._inner

    async def open_vhost(self, vhost: str, user: str) -> VirtualHost:
        if user in self._superusers:
            # Allowed everything: no wrapper, no per-operation cost.
            return await self._inner.open_vhost(vhost, user)
        scope = permission_scope(self._mapper, vhost)
        if self._store.lookup(scope, user) is None:
            raise vhost_refused(vhost, user)
        handle = await self._inner.open_vhost(vhost, user)
        return AuthorizingVirtualHost(handle, self._store, scope, user)


def _argument_name(arguments: Mapping[str, Any], key: str) -> str | None:
    """The exchange named by an ``alternate-exchange``/``x-dead-letter-exchange`` argument;
    None when absent or not a string (the backend refuses a wrong type with its own 406)."""
    value = arguments.get(key)
    if isinstance(value, Field):
        value = value.value
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _reserved(name: str) -> bool:
    return name.startswith(_RESERVED_PREFIX)


def _exchange_resource(name: str) -> str:
    return name or DEFAULT_EXCHANGE_RESOURCE


class AuthorizingVirtualHost:
    """One connection's view of a vhost: every operation checked, then delegated."""

    def __init__(self, inner: VirtualHost, store: PermissionStore, scope: str, user: str) -> None:
        self.inner = inner
        self.name = inner.name
        self.replies = inner.replies
        self._store = store
        self._scope = scope
        self._user = user

    def _check(self, access: Access, kind: str, name: str) -> None:
        # Looked up each time (not held): a change applies to the next operation.
        permissions = self._store.lookup(self._scope, self._user)
        if permissions is None or not permissions.allows(access, name):
            raise ChannelError(
                ReplyCode.ACCESS_REFUSED,
                f"{access} access to {resource(kind, name, self.name)} refused for user "
                f"'{self._user}'",
            )

    async def _authorize(self, command: cmd.Command, owner: Owner) -> None:
        """The checks of the table above for ``command``, by its type, in RabbitMQ's order."""
        match command:
            case cmd.ExchangeDeclare(exchange=name, passive=False) if name:
                # The default exchange is refused before any permission check (even
                # passively), by the inner backend; passive declares need no permission.
                self._check(Access.CONFIGURE, "exchange", name)
                alternate = _argument_name(command.arguments, "alternate-exchange")
                if alternate is not None and not await self._exchange_exists(command):
                    # Only when the declare creates it: then messages may flow to the AE.
                    self._check(Access.READ, "exchange", name)
                    self._check(Access.WRITE, "exchange", _exchange_resource(alternate))
            case cmd.ExchangeDelete(exchange=name) if name and not _reserved(name):
                # "" and amq.* are refused whatever the permissions (rabbit_channel checks
                # those first): the inner backend says so in RabbitMQ's words.
                self._check(Access.CONFIGURE, "exchange", name)
            case cmd.QueueDeclare(queue=name, passive=False):
                # Server-named queues too: their amq.gen-* name is checked (RabbitMQ users
                # grant "^amq\.gen-.*" for them).
                self._check(Access.CONFIGURE, "queue", name)
                dead_letter = _argument_name(command.arguments, "x-dead-letter-exchange")
                if dead_letter is not None and not await self._queue_exists(name, owner):
                    self._check(Access.READ, "queue", name)
                    self._check(Access.WRITE, "exchange", _exchange_resource(dead_letter))
            case cmd.QueueDelete(queue=name):
                self._check(Access.CONFIGURE, "queue", name)
            case (
                cmd.QueuePurge(queue=name) | cmd.BasicConsume(queue=name) | cmd.BasicGet(queue=name)
            ):
                self._check(Access.READ, "queue", name)
            case (
                cmd.QueueBind(queue=queue, exchange=exchange)
                | cmd.QueueUnbind(queue=queue, exchange=exchange)
            ):
                # rabbit_channel:binding_action: write on the destination, then (after
                # refusing the default exchange, which the inner backend does) read on the
                # source.
                self._check(Access.WRITE, "queue", queue)
                if exchange:
                    self._check(Access.READ, "exchange", exchange)
            case (
                cmd.ExchangeBind(destination=destination, source=source)
                | cmd.ExchangeUnbind(destination=destination, source=source)
            ):
                # The same, with an exchange as the destination: write on it (the default
                # exchange as amq.default), then the default exchange is refused at either
                # end (by the inner backend), then read on the source.
                self._check(Access.WRITE, "exchange", _exchange_resource(destination))
                if destination and source:
                    self._check(Access.READ, "exchange", source)
            case _:
                pass  # passive declares, and the exchange operations the backend refuses

    async def _exchange_exists(self, command: cmd.ExchangeDeclare) -> bool:
        return await _exists(
            self.inner.declare_exchange(cmd.ExchangeDeclare(command.exchange, passive=True))
        )

    async def _queue_exists(self, name: str, owner: Owner) -> bool:
        return await _exists(self.inner.declare_queue(cmd.QueueDeclare(name, passive=True), owner))

    # ------------------------------------------------------------------ the interface

    async def declare_exchange(self, command: cmd.ExchangeDeclare) -> None:
        await self._authorize(command, _NOBODY)
        await self.inner.declare_exchange(command)

    async def delete_exchange(self, command: cmd.ExchangeDelete) -> None:
        await self._authorize(command, _NOBODY)
        await self.inner.delete_exchange(command)

    async def declare_queue(self, command: cmd.QueueDeclare, owner: Owner) -> QueueStatus:
        await self._authorize(command, owner)
        return await self.inner.declare_queue(command, owner)

    async def delete_queue(self, command: cmd.QueueDelete, owner: Owner) -> int:
        await self._authorize(command, owner)
        return await self.inner.delete_queue(command, owner)

    async def purge_queue(self, command: cmd.QueuePurge, owner: Owner) -> int:
        await self._authorize(command, owner)
        return await self.inner.purge_queue(command, owner)

    async def bind_queue(self, command: cmd.QueueBind, owner: Owner) -> None:
        await self._authorize(command, owner)
        await self.inner.bind_queue(command, owner)

    async def unbind_queue(self, command: cmd.QueueUnbind, owner: Owner) -> None:
        await self._authorize(command, owner)
        await self.inner.unbind_queue(command, owner)

    async def bind_exchange(self, command: cmd.ExchangeBind) -> None:
        await self._authorize(command, _NOBODY)
        await self.inner.bind_exchange(command)

    async def unbind_exchange(self, command: cmd.ExchangeUnbind) -> None:
        await self._authorize(command, _NOBODY)
        await self.inner.unbind_exchange(command)

    async def publish(self, message: Message, *, mandatory: bool = False) -> PublishOutcome:
        # The hot path: no command object, one check.
        self._check(Access.WRITE, "exchange", _exchange_resource(message.exchange))
        return await self.inner.publish(message, mandatory=mandatory)

    async def send_reply(self, message: Message) -> None:
        # A reply is a publish to the default exchange: RabbitMQ checks the same permission.
        self._check(Access.WRITE, "exchange", _exchange_resource(message.exchange))
        await self.inner.send_reply(message)

    async def consume(
        self,
        command: cmd.BasicConsume,
        owner: Owner,
        *,
        prefetch: int = 0,
        qos: ConsumerQos = NO_QOS,
    ) -> QueueSubscription:
        await self._authorize(command, owner)
        return await self.inner.consume(command, owner, prefetch=prefetch, qos=qos)

    async def get(self, command: cmd.BasicGet, owner: Owner) -> tuple[Delivery, int] | None:
        await self._authorize(command, owner)
        return await self.inner.get(command, owner)

    async def release(self, owner: Owner) -> None:
        await self.inner.release(owner)


async def _exists(declare: Awaitable[object]) -> bool:
    """Whether a passive declare finds its entity (404: it does not)."""
    try:
        await declare
    except ChannelError as error:
        if error.reply_code == ReplyCode.NOT_FOUND:
            return False
    return True


@asynccontextmanager
async def open_authorization(
    backend: Backend,
    *,
    zookeeper: str,
    session_timeout: float,
    superusers: Iterable[str],
    mapper: VhostMapper,
    prefix: str = DEFAULT_PREFIX,
    connect_timeout: float = 15.0,
) -> AsyncIterator[AuthorizingBackend]:
    """``backend`` behind authorization, with permissions from ZooKeeper loaded (before the
    block starts: nobody is refused for want of a cache) and kept current inside the block.

    Raises ``MetadataUnavailable`` (not in an exception group) when ZooKeeper cannot be
    reached or read.
    """
    store = ZooKeeperPermissionStore(
        zookeeper, prefix=prefix, session_timeout=session_timeout, connect_timeout=connect_timeout
    )
    async with serving_permissions(store):
        yield AuthorizingBackend(backend, store, superusers=superusers, mapper=mapper)
