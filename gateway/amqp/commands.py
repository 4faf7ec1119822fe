"""The client's commands and the server's replies, typed: pamqp stays inside the core.

The core turns each exchange.*, queue.*, basic.* (but publish and the acks, which have fast
events of their own), confirm.* and tx.* method into one of the frozen dataclasses below and
hands it to the shell in a ``CommandReceived`` event; the shell acts on it, passes it on to
the backend as it is (``VirtualHost.declare_queue(command, owner)``), and answers with one of
the replies through ``ServerConnection.send_reply``, which leaves the reply out when the client
asked for ``nowait`` and names the command in a Channel.Close or Connection.Close
(``ServerConnection.refuse``).

Fields carry the method's arguments under the spec's names (§1.4 of amqp0-9-1.xml), without the
deprecated ``ticket``/``reserved-1``. Tables (``arguments``) keep each value's AMQP type
(``fieldtable.Field``): equivalence checks and headers-exchange matching compare types. Every
field has the spec's default, so a test can write ``QueueDeclare("q", durable=True)``.

RabbitMQ strips CR and LF from the entity names of declare, delete, bind and unbind, and from
no others (``rabbit_channel:strip_cr_lf``): the names here are already stripped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final

from pamqp import base
from pamqp import commands as spec

from gateway.amqp.codec import encode_method, make_method
from gateway.amqp.fieldtable import Field

__all__ = [
    "BasicCancel",
    "BasicCancelOk",
    "BasicConsume",
    "BasicConsumeOk",
    "BasicGet",
    "BasicGetEmpty",
    "BasicQos",
    "BasicQosOk",
    "BasicRecover",
    "BasicRecoverAsync",
    "BasicRecoverOk",
    "Command",
    "ConfirmSelect",
    "ConfirmSelectOk",
    "ExchangeBind",
    "ExchangeBindOk",
    "ExchangeDeclare",
    "ExchangeDeclareOk",
    "ExchangeDelete",
    "ExchangeDeleteOk",
    "ExchangeUnbind",
    "ExchangeUnbindOk",
    "QueueBind",
    "QueueBindOk",
    "QueueDeclare",
    "QueueDeclareOk",
    "QueueDelete",
    "QueueDeleteOk",
    "QueuePurge",
    "QueuePurgeOk",
    "QueueUnbind",
    "QueueUnbindOk",
    "Reply",
    "TxCommit",
    "TxCommitOk",
    "TxRollback",
    "TxRollbackOk",
    "TxSelect",
    "TxSelectOk",
    "command_from",
    "encode_reply",
    "strip_cr_lf",
]

Arguments = Mapping[str, Field]
_NO_ARGUMENTS: Final[Arguments] = MappingProxyType({})


def _no_arguments() -> Arguments:
    # One shared read-only table (a dataclass default must come from a factory).
    return _NO_ARGUMENTS


def strip_cr_lf(name: str) -> str:
    """RabbitMQ removes CR and LF from the names it receives (``rabbit_channel:strip_cr_lf``)."""
    if "\r" in name or "\n" in name:
        return name.replace("\r", "").replace("\n", "")
    return name


# ---------------------------------------------------------------------------- commands
# ``METHOD`` is the (class id, method id) a Close names when the command is refused;
# ``nowait`` is a class constant where the spec gives the method no such bit.


@dataclass(frozen=True, slots=True)
class ExchangeDeclare:
    METHOD: ClassVar[tuple[int, int]] = (40, 10)
    exchange: str
    type: str = "direct"
    passive: bool = False
    durable: bool = False
    auto_delete: bool = False
    internal: bool = False
    nowait: bool = False
    arguments: Arguments = field(default_factory=_no_arguments)


@dataclass(frozen=True, slots=True)
class ExchangeDelete:
    METHOD: ClassVar[tuple[int, int]] = (40, 20)
    exchange: str
    if_unused: bool = False
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class ExchangeBind:
    """RabbitMQ's extension (capability ``exchange_exchange_bindings``): messages that
    ``source`` routes with this binding go on to the exchange ``destination``."""

    METHOD: ClassVar[tuple[int, int]] = (40, 30)
    destination: str
    source: str
    routing_key: str = ""
    nowait: bool = False
    arguments: Arguments = field(default_factory=_no_arguments)


@dataclass(frozen=True, slots=True)
class ExchangeUnbind:
    METHOD: ClassVar[tuple[int, int]] = (40, 40)
    destination: str
    source: str
    routing_key: str = ""
    nowait: bool = False
    arguments: Arguments = field(default_factory=_no_arguments)


@dataclass(frozen=True, slots=True)
class QueueDeclare:
    """``queue`` may be ``""`` (a server-named queue) only until the shell names it: the
    backend always gets a name, and ``server_named`` says the shell made it up for this
    command (random, so nobody can have used it before: docs/fleet.md, "Lazy
    subscriptions"). Not on the wire."""

    METHOD: ClassVar[tuple[int, int]] = (50, 10)
    queue: str = ""
    passive: bool = False
    durable: bool = False
    exclusive: bool = False
    auto_delete: bool = False
    nowait: bool = False
    arguments: Arguments = field(default_factory=_no_arguments)
    server_named: bool = False


@dataclass(frozen=True, slots=True)
class QueueBind:
    METHOD: ClassVar[tuple[int, int]] = (50, 20)
    queue: str
    exchange: str
    routing_key: str = ""
    nowait: bool = False
    arguments: Arguments = field(default_factory=_no_arguments)


@dataclass(frozen=True, slots=True)
class QueueUnbind:
    METHOD: ClassVar[tuple[int, int]] = (50, 50)
    nowait: ClassVar[bool] = False  # Queue.Unbind has no nowait bit: Unbind-Ok always goes
    queue: str
    exchange: str
    routing_key: str = ""
    arguments: Arguments = field(default_factory=_no_arguments)


@dataclass(frozen=True, slots=True)
class QueuePurge:
    METHOD: ClassVar[tuple[int, int]] = (50, 30)
    queue: str
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class QueueDelete:
    METHOD: ClassVar[tuple[int, int]] = (50, 40)
    queue: str
    if_unused: bool = False
    if_empty: bool = False
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class BasicQos:
    METHOD: ClassVar[tuple[int, int]] = (60, 10)
    nowait: ClassVar[bool] = False
    prefetch_size: int = 0
    prefetch_count: int = 0
    global_: bool = False


@dataclass(frozen=True, slots=True)
class BasicConsume:
    """``arguments``: consumer arguments (``x-priority``, ``x-stream-offset``…), checked by
    the backend against the queue's."""

    METHOD: ClassVar[tuple[int, int]] = (60, 20)
    queue: str
    consumer_tag: str = ""
    no_local: bool = False
    no_ack: bool = False
    exclusive: bool = False
    nowait: bool = False
    arguments: Arguments = field(default_factory=_no_arguments)


@dataclass(frozen=True, slots=True)
class BasicCancel:
    METHOD: ClassVar[tuple[int, int]] = (60, 30)
    consumer_tag: str
    nowait: bool = False


@dataclass(frozen=True, slots=True)
class BasicGet:
    METHOD: ClassVar[tuple[int, int]] = (60, 70)
    nowait: ClassVar[bool] = False
    queue: str
    no_ack: bool = False


@dataclass(frozen=True, slots=True)
class BasicRecover:
    METHOD: ClassVar[tuple[int, int]] = (60, 110)
    nowait: ClassVar[bool] = False
    requeue: bool = False


@dataclass(frozen=True, slots=True)
class BasicRecoverAsync:
    """The deprecated Basic.Recover-Async: Basic.Recover without a reply."""

    METHOD: ClassVar[tuple[int, int]] = (60, 100)
    nowait: ClassVar[bool] = True
    requeue: bool = False


@dataclass(frozen=True, slots=True)
class ConfirmSelect:
    METHOD: ClassVar[tuple[int, int]] = (85, 10)
    nowait: bool = False


# Tx.Select, Commit and Rollback carry no arguments and are always answered.
@dataclass(frozen=True, slots=True)
class TxSelect:
    METHOD: ClassVar[tuple[int, int]] = (90, 10)
    nowait: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class TxCommit:
    METHOD: ClassVar[tuple[int, int]] = (90, 20)
    nowait: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class TxRollback:
    METHOD: ClassVar[tuple[int, int]] = (90, 30)
    nowait: ClassVar[bool] = False


Command = (
    ExchangeDeclare
    | ExchangeDelete
    | ExchangeBind
    | ExchangeUnbind
    | QueueDeclare
    | QueueBind
    | QueueUnbind
    | QueuePurge
    | QueueDelete
    | BasicQos
    | BasicConsume
    | BasicCancel
    | BasicGet
    | BasicRecover
    | BasicRecoverAsync
    | ConfirmSelect
    | TxSelect
    | TxCommit
    | TxRollback
)


def _arguments(table: Any) -> Arguments:
    return table or _NO_ARGUMENTS


_BUILDERS: Final[dict[type[base.Frame], Callable[[Any], Command]]] = {
    spec.Exchange.Declare: lambda m: ExchangeDeclare(
        strip_cr_lf(m.exchange),
        m.exchange_type,
        m.passive,
        m.durable,
        m.auto_delete,
        m.internal,
        m.nowait,
        _arguments(m.arguments),
    ),
    spec.Exchange.Delete: lambda m: ExchangeDelete(strip_cr_lf(m.exchange), m.if_unused, m.nowait),
    spec.Exchange.Bind: lambda m: ExchangeBind(
        strip_cr_lf(m.destination),
        strip_cr_lf(m.source),
        m.routing_key,
        m.nowait,
        _arguments(m.arguments),
    ),
    spec.Exchange.Unbind: lambda m: ExchangeUnbind(
        strip_cr_lf(m.destination),
        strip_cr_lf(m.source),
        m.routing_key,
        m.nowait,
        _arguments(m.arguments),
    ),
    spec.Queue.Declare: lambda m: QueueDeclare(
        strip_cr_lf(m.queue),
        m.passive,
        m.durable,
        m.exclusive,
        m.auto_delete,
        m.nowait,
        _arguments(m.arguments),
    ),
    spec.Queue.Bind: lambda m: QueueBind(
        strip_cr_lf(m.queue),
        strip_cr_lf(m.exchange),
        m.routing_key,
        m.nowait,
        _arguments(m.arguments),
    ),
    spec.Queue.Unbind: lambda m: QueueUnbind(
        strip_cr_lf(m.queue), strip_cr_lf(m.exchange), m.routing_key, _arguments(m.arguments)
    ),
    spec.Queue.Purge: lambda m: QueuePurge(m.queue, m.nowait),
    spec.Queue.Delete: lambda m: QueueDelete(
        strip_cr_lf(m.queue), m.if_unused, m.if_empty, m.nowait
    ),
    spec.Basic.Qos: lambda m: BasicQos(m.prefetch_size, m.prefetch_count, m.global_),
    spec.Basic.Consume: lambda m: BasicConsume(
        m.queue,
        m.consumer_tag,
        m.no_local,
        m.no_ack,
        m.exclusive,
        m.nowait,
        _arguments(m.arguments),
    ),
    spec.Basic.Cancel: lambda m: BasicCancel(m.consumer_tag, m.nowait),
    spec.Basic.Get: lambda m: BasicGet(m.queue, m.no_ack),
    spec.Basic.Recover: lambda m: BasicRecover(m.requeue),
    spec.Basic.RecoverAsync: lambda m: BasicRecoverAsync(m.requeue),
    spec.Confirm.Select: lambda m: ConfirmSelect(m.nowait),
    spec.Tx.Select: lambda m: TxSelect(),
    spec.Tx.Commit: lambda m: TxCommit(),
    spec.Tx.Rollback: lambda m: TxRollback(),
}


def command_from(method: base.Frame) -> Command | None:
    """The command for a decoded client method (tables decoded with ``typed_tables``); None
    for a method the gateway does not implement (none is left; the core would answer 540)."""
    build = _BUILDERS.get(type(method))
    return None if build is None else build(method)


# ----------------------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class ExchangeDeclareOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Exchange.DeclareOk


@dataclass(frozen=True, slots=True)
class ExchangeDeleteOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Exchange.DeleteOk


@dataclass(frozen=True, slots=True)
class ExchangeBindOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Exchange.BindOk


@dataclass(frozen=True, slots=True)
class ExchangeUnbindOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Exchange.UnbindOk


@dataclass(frozen=True, slots=True)
class QueueDeclareOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Queue.DeclareOk
    queue: str
    message_count: int
    consumer_count: int


@dataclass(frozen=True, slots=True)
class QueueBindOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Queue.BindOk


@dataclass(frozen=True, slots=True)
class QueueUnbindOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Queue.UnbindOk


@dataclass(frozen=True, slots=True)
class QueuePurgeOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Queue.PurgeOk
    message_count: int


@dataclass(frozen=True, slots=True)
class QueueDeleteOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Queue.DeleteOk
    message_count: int


@dataclass(frozen=True, slots=True)
class BasicQosOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Basic.QosOk


@dataclass(frozen=True, slots=True)
class BasicConsumeOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Basic.ConsumeOk
    consumer_tag: str


@dataclass(frozen=True, slots=True)
class BasicCancelOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Basic.CancelOk
    consumer_tag: str


@dataclass(frozen=True, slots=True)
class BasicGetEmpty:
    METHOD: ClassVar[type[base.Frame]] = spec.Basic.GetEmpty


@dataclass(frozen=True, slots=True)
class BasicRecoverOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Basic.RecoverOk


@dataclass(frozen=True, slots=True)
class ConfirmSelectOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Confirm.SelectOk


@dataclass(frozen=True, slots=True)
class TxSelectOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Tx.SelectOk


@dataclass(frozen=True, slots=True)
class TxCommitOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Tx.CommitOk


@dataclass(frozen=True, slots=True)
class TxRollbackOk:
    METHOD: ClassVar[type[base.Frame]] = spec.Tx.RollbackOk


Reply = (
    ExchangeDeclareOk
    | ExchangeDeleteOk
    | ExchangeBindOk
    | ExchangeUnbindOk
    | QueueDeclareOk
    | QueueBindOk
    | QueueUnbindOk
    | QueuePurgeOk
    | QueueDeleteOk
    | BasicQosOk
    | BasicConsumeOk
    | BasicCancelOk
    | BasicGetEmpty
    | BasicRecoverOk
    | ConfirmSelectOk
    | TxSelectOk
    | TxCommitOk
    | TxRollbackOk
)


def encode_reply(reply: Reply) -> bytes:
    """The method payload of ``reply``. Built without pamqp's name validation: RabbitMQ
    accepts any UTF-8 name up to 255 octets (``"файл"``), and so do we."""
    values = {name: getattr(reply, name) for name in reply.__slots__}
    return encode_method(make_method(reply.METHOD, **values))
