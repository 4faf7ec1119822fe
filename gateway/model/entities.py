"""Exchanges, queues and bindings, and RabbitMQ's rules for declaring and using them.

The rules and their reply texts are RabbitMQ's (rabbitmq-server ``rabbit_channel``,
``rabbit_exchange``, ``rabbit_amqqueue``, ``rabbit_misc``), because clients log the texts and a
few match on them:

- ``amq.`` names are reserved: declaring a *new* exchange with one, or declaring any
  client-named queue with one, is 403 ``exchange name 'amq.x' contains reserved prefix
  'amq.*'``. Redeclaring an existing ``amq.`` exchange is allowed (clients do it for
  ``amq.topic``) and is checked for equivalence like any other.
- The default exchange ``""`` cannot be declared (even passively), deleted, or bound to or
  from: 403 ``operation not permitted on the default exchange``. ``amq.*`` exchanges cannot be
  deleted: 403 ``deletion of system exchange 'amq.direct' in vhost '/' not allowed``.
- An unknown exchange type is 406 ``unknown exchange type 'x'``: RabbitMQ answered 503
  COMMAND_INVALID (closing the connection) until rabbitmq-server#11214 (3.12.14/3.13.3) made
  it a channel error.
- Redeclaring with other properties is 406 ``inequivalent arg 'durable' for exchange 'x' in
  vhost '/': received 'true' but current is 'false'`` (``rabbit_misc:equivalence_fail``).
  Exchanges compare type, durable, auto_delete, internal and only the ``alternate-exchange``
  argument; queues check exclusivity first (405), then durable, auto_delete and the arguments
  their queue type knows (``rabbit_queue_type:arguments(queue_arguments, Type)``).
- Names: any UTF-8 up to 255 octets; RabbitMQ strips CR and LF from names it receives
  (``strip_cr_lf``, done by the core: ``gateway.amqp.commands``) and enforces nothing else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from gateway.amqp.commands import (
    ExchangeBind,
    ExchangeDeclare,
    ExchangeUnbind,
    QueueBind,
    QueueDeclare,
    QueueUnbind,
)
from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.model.arguments import QUEUE_ARGUMENTS
from gateway.model.values import erlang_equal, format_field, identical, type_class, type_name

__all__ = [
    "DEFAULT_EXCHANGE",
    "PREDECLARED_EXCHANGES",
    "Binding",
    "Exchange",
    "ExchangeBinding",
    "ExchangeType",
    "Queue",
    "binding_for",
    "check_bind",
    "check_equivalent",
    "check_exchange_bind",
    "check_exchange_declare",
    "check_exchange_delete",
    "check_exclusive_access",
    "check_name",
    "check_queue_declare",
    "declared_exchange",
    "declared_queue",
    "exchange_binding_for",
    "not_found",
    "queue_type_of",
    "resource",
]

DEFAULT_EXCHANGE: Final = ""
_RESERVED_PREFIX: Final = "amq."
_MAX_NAME_OCTETS: Final = 255
_EMPTY: Final[Mapping[str, Field]] = MappingProxyType({})


class ExchangeType(enum.StrEnum):
    DIRECT = "direct"
    FANOUT = "fanout"
    TOPIC = "topic"
    HEADERS = "headers"

    @property
    def keyed(self) -> bool:
        """Whether the routing key is part of the topic name (reference/002)."""
        return self is ExchangeType.DIRECT or self is ExchangeType.TOPIC

    @classmethod
    def parse(cls, text: str) -> ExchangeType:
        """The type named in a non-passive Exchange.Declare (a passive one ignores it);
        406 for a type RabbitMQ would not know."""
        try:
            return cls(text)
        except ValueError:
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED, f"unknown exchange type '{text}'"
            ) from None


def _empty() -> Mapping[str, Field]:
    return _EMPTY


def _freeze(arguments: Mapping[str, Field] | None) -> Mapping[str, Field]:
    if not arguments:
        return _EMPTY
    return MappingProxyType(dict(arguments))


@dataclass(frozen=True, slots=True)
class Exchange:
    """An exchange as declared. ``arguments`` is read-only and not part of the hash."""

    name: str
    type: ExchangeType
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Field] = field(default_factory=_empty, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _freeze(self.arguments))


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue as declared. ``owner`` identifies the declaring connection of an exclusive
    queue and is None otherwise."""

    name: str
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    arguments: Mapping[str, Field] = field(default_factory=_empty, hash=False)
    owner: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _freeze(self.arguments))
        if self.exclusive != (self.owner is not None):
            raise ValueError("an exclusive queue has an owner and only an exclusive queue has")


@dataclass(frozen=True, slots=True)
class Binding:
    """A queue's binding to an exchange. Two bindings with the same key and different
    arguments are different bindings (headers exchanges rely on that), as in RabbitMQ."""

    queue: str
    exchange: str
    routing_key: str = ""
    arguments: Mapping[str, Field] = field(default_factory=_empty, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _freeze(self.arguments))


@dataclass(frozen=True, slots=True)
class ExchangeBinding:
    """An exchange's binding to another exchange (Exchange.Bind, RabbitMQ's extension):
    messages the ``source`` routes with it go on to the ``destination``, which routes them
    with its own bindings as if they had been published to it. As with queues, bindings that
    differ only in their arguments are different bindings."""

    source: str
    destination: str
    routing_key: str = ""
    arguments: Mapping[str, Field] = field(default_factory=_empty, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", _freeze(self.arguments))


def _predeclared(name: str, type_: ExchangeType) -> Exchange:
    return Exchange(name, type_, durable=True)


# Every vhost has these (rabbit_vhost's default exchanges, less the internal
# amq.rabbitmq.trace firehose, which the gateway does not implement). amq.match and amq.headers
# are both headers exchanges: the 0-9-1 PDF and XML name it differently.
PREDECLARED_EXCHANGES: Final[tuple[Exchange, ...]] = (
    _predeclared(DEFAULT_EXCHANGE, ExchangeType.DIRECT),
    _predeclared("amq.direct", ExchangeType.DIRECT),
    _predeclared("amq.fanout", ExchangeType.FANOUT),
    _predeclared("amq.topic", ExchangeType.TOPIC),
    _predeclared("amq.headers", ExchangeType.HEADERS),
    _predeclared("amq.match", ExchangeType.HEADERS),
)

_EXCHANGE_ARGUMENTS: Final = ("alternate-exchange",)

# ------------------------------------------------------------------------------ messages


def resource(kind: str, name: str, vhost: str) -> str:
    """``queue 'q' in vhost '/'``: how RabbitMQ names a resource (``rabbit_misc:rs``)."""
    return f"{kind} '{name}' in vhost '{vhost}'"


def not_found(kind: str, name: str, vhost: str) -> ChannelError:
    """404 ``no queue 'q' in vhost '/'``."""
    return ChannelError(ReplyCode.NOT_FOUND, f"no {resource(kind, name, vhost)}")


def check_name(kind: str, name: str) -> None:
    """A name must fit a shortstr: 255 octets of UTF-8 (the wire guarantees it; names from
    arguments such as ``x-dead-letter-exchange`` are longstrs and may not)."""
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_NAME_OCTETS:
        raise ChannelError(
            ReplyCode.PRECONDITION_FAILED,
            f"{kind} name '{name[:64]}...' is longer than {_MAX_NAME_OCTETS} octets",
        )


def _reserved(kind: str, name: str) -> ChannelError:
    return ChannelError(
        ReplyCode.ACCESS_REFUSED, f"{kind} name '{name}' contains reserved prefix 'amq.*'"
    )


def _default_exchange_refused() -> ChannelError:
    return ChannelError(ReplyCode.ACCESS_REFUSED, "operation not permitted on the default exchange")


# -------------------------------------------------------------------------- declare rules


def check_exchange_declare(name: str, *, passive: bool, exists: bool) -> None:
    """Exchange.Declare's name rules, before the lookup result is used.

    ``""`` is refused even passively; ``amq.`` is refused only when the exchange would be
    created ("the exclusion of amq. prefixed names only applies on actual creation, and not in
    the cases where the entity already exists or passive=true", rabbit_channel).
    """
    check_name("exchange", name)
    if name == DEFAULT_EXCHANGE:
        raise _default_exchange_refused()
    if not passive and not exists and name.startswith(_RESERVED_PREFIX):
        raise _reserved("exchange", name)


def check_queue_declare(name: str, *, passive: bool) -> None:
    """Queue.Declare's name rule for a client-named queue (``""`` means server-named).

    Unlike exchanges, RabbitMQ checks the prefix before looking the queue up, so a non-passive
    redeclare of an existing ``amq.gen-…`` queue is refused too.
    """
    check_name("queue", name)
    if not passive and name.startswith(_RESERVED_PREFIX):
        raise _reserved("queue", name)


def check_exchange_delete(name: str, vhost: str) -> None:
    if name == DEFAULT_EXCHANGE:
        raise _default_exchange_refused()
    if name.startswith(_RESERVED_PREFIX):
        raise ChannelError(
            ReplyCode.ACCESS_REFUSED,
            f"deletion of system {resource('exchange', name, vhost)} not allowed",
        )


def check_bind(exchange: str) -> None:
    """Queue.Bind/Unbind: the default exchange's bindings are implicit and fixed."""
    if exchange == DEFAULT_EXCHANGE:
        raise _default_exchange_refused()


def check_exchange_bind(destination: str, source: str) -> None:
    """Exchange.Bind/Unbind: the default exchange can be neither end, 403 as for queues
    (``rabbit_channel:binding_action_with_checks`` checks the destination, then the source)."""
    check_bind(destination)
    check_bind(source)


def declared_queue(command: QueueDeclare, connection: str) -> Queue:
    """The queue a Queue.Declare asks for, as RabbitMQ records it: an exclusive queue is owned
    by the declaring connection and is never durable (``Durable = DurableDeclare andalso not
    ExclusiveDeclare`` in rabbit_channel)."""
    return Queue(
        command.queue,
        durable=command.durable and not command.exclusive,
        exclusive=command.exclusive,
        auto_delete=command.auto_delete,
        arguments=command.arguments or _EMPTY,
        owner=connection if command.exclusive else None,
    )


def declared_exchange(command: ExchangeDeclare) -> Exchange:
    """The exchange an Exchange.Declare asks for (406 for an unknown type)."""
    return Exchange(
        command.exchange,
        ExchangeType.parse(command.type),
        command.durable,
        command.auto_delete,
        command.internal,
        command.arguments,
    )


def binding_for(command: QueueBind | QueueUnbind) -> Binding:
    """The binding a Queue.Bind adds or a Queue.Unbind removes."""
    return Binding(command.queue, command.exchange, command.routing_key, command.arguments)


def exchange_binding_for(command: ExchangeBind | ExchangeUnbind) -> ExchangeBinding:
    """The binding an Exchange.Bind adds or an Exchange.Unbind removes."""
    return ExchangeBinding(
        command.source, command.destination, command.routing_key, command.arguments
    )


def check_exclusive_access(queue: Queue, connection: str | None, vhost: str) -> None:
    """405 unless ``connection`` may use ``queue``: a non-exclusive queue is anyone's, an
    exclusive one only its owner's (``rabbit_amqqueue:check_exclusive_access``, lax)."""
    if queue.owner is not None and queue.owner != connection:
        raise _locked(queue.name, vhost)


def _locked(name: str, vhost: str) -> ChannelError:
    return ChannelError(
        ReplyCode.RESOURCE_LOCKED,
        f"cannot obtain exclusive access to locked {resource('queue', name, vhost)}. It could "
        "be originally declared on another connection or the exclusive property value does "
        "not match that of the original declaration.",
    )


# -------------------------------------------------------------------------- equivalence


def queue_type_of(arguments: Mapping[str, Field]) -> str:
    """The queue type named by ``x-queue-type`` (classic when absent or not a string)."""
    field_ = arguments.get("x-queue-type")
    if field_ is not None and field_.kind == "S" and isinstance(field_.value, str):
        return field_.value
    return "classic"


def check_equivalent(
    existing: Exchange | Queue, requested: Exchange | Queue, *, vhost: str
) -> None:
    """406 (405 for exclusivity) unless redeclaring ``existing`` as ``requested`` is a no-op.

    The checks and their order are RabbitMQ's; the first difference found is reported.
    """
    if isinstance(existing, Exchange) and isinstance(requested, Exchange):
        where = resource("exchange", existing.name, vhost)
        _compare_field(where, "type", existing.type.value, requested.type.value)
        _compare_field(where, "durable", existing.durable, requested.durable)
        _compare_field(where, "auto_delete", existing.auto_delete, requested.auto_delete)
        _compare_field(where, "internal", existing.internal, requested.internal)
        _compare_arguments(where, existing.arguments, requested.arguments, _EXCHANGE_ARGUMENTS)
    elif isinstance(existing, Queue) and isinstance(requested, Queue):
        # Strict exclusivity: the owner must be the same, which also catches an exclusive
        # redeclare of a shared queue and the reverse.
        if existing.owner != requested.owner:
            raise _locked(existing.name, vhost)
        where = resource("queue", existing.name, vhost)
        _compare_field(where, "durable", existing.durable, requested.durable)
        _compare_field(where, "auto_delete", existing.auto_delete, requested.auto_delete)
        # Compared on redeclaration: the queue type's known arguments, the same list RabbitMQ
        # validates a declare against. Anything else (x-foo, x-priority on a queue, ...) may
        # differ between declarations.
        keys = QUEUE_ARGUMENTS.get(queue_type_of(existing.arguments), QUEUE_ARGUMENTS["classic"])
        _compare_arguments(where, existing.arguments, requested.arguments, keys)
    else:
        raise TypeError("check_equivalent compares two exchanges or two queues")


def _fail(where: str, key: str, received: str, current: str) -> ChannelError:
    return ChannelError(
        ReplyCode.PRECONDITION_FAILED,
        f"inequivalent arg '{key}' for {where}: received {received} but current is {current}",
    )


def _compare_field(where: str, key: str, current: object, received: object) -> None:
    if current != received:
        raise _fail(where, key, _quoted(received), _quoted(current))


def _compare_arguments(
    where: str,
    existing: Mapping[str, Field],
    requested: Mapping[str, Field],
    keys: tuple[str, ...],
) -> None:
    # rabbit_misc:assert_args_equivalence1, key by key.
    for key in keys:
        current = existing.get(key)
        received = requested.get(key)
        if current == received:
            continue
        if current is not None and received is not None:
            if type_class(current.kind) == type_class(received.kind) and erlang_equal(
                current, received
            ):
                continue
            # The same (=:=) value under types of different classes is still accepted:
            # RabbitMQ falls back to assert_field_equivalence on the bare values.
            if identical(current, received):
                continue
            raise _fail(where, key, _quoted_value(received), _quoted_value(current))
        present = current if current is not None else received
        assert present is not None
        if key == "x-queue-type" and present.kind == "S" and present.value == "classic":
            # Classic queues may or may not carry x-queue-type (rabbitmq-common#341).
            continue
        raise _fail(where, key, _typed(received), _typed(current))


def _quoted(value: object) -> str:
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    return f"'{value}'"


def _quoted_value(field_: Field) -> str:
    return f"'{format_field(field_)}'"


def _typed(field_: Field | None) -> str:
    if field_ is None:
        return "none"
    return f"the value '{format_field(field_)}' of type '{type_name(field_.kind)}'"
