"""Queue, exchange and consumer arguments: RabbitMQ's validation, and the gateway's refusals.

RabbitMQ (``rabbit_amqqueue:check_declare_arguments`` / ``check_consume_arguments``, 4.x)
checks, in this order: ``x-queue-type`` names a known type; the type and value of each
argument its queue type knows (``declare_args()`` validators); no argument known to *another*
queue type only. Arguments no queue type knows (``x-foo``, ``foo``) are stored and ignored.
Failures are 406 PRECONDITION_FAILED, ``invalid arg 'x-max-length' for queue 'q' in vhost
'/': {value_negative,-1}`` or ``invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue
type rabbit_classic_queue``. A quorum queue must be durable, non-exclusive and not
auto-delete (``rabbit_queue_type_util``: ``invalid property 'non-durable' for queue ...``).

The gateway does all of that, then refuses, in the same words, every argument that would
change what RabbitMQ does and that the gateway does not implement: ``... : not implemented by
Starlight for RabbitMQ``. An argument that is accepted and ignored would lose or keep messages
the application expects otherwise (a bounded queue growing, a dead-letter queue never fed).
Accepted without effect are only the arguments whose effect nobody can observe over AMQP
(storage format, replica placement, memory tuning), and RabbitMQ's own no-ops. The table of
decisions is docs/compatibility.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Final

from gateway.amqp.errors import ChannelError, ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.model.streams import max_age_ms
from gateway.model.values import type_name

__all__ = [
    "ACCEPTED_WITHOUT_EFFECT",
    "CONSUMER_ARGUMENTS",
    "IMPLEMENTED",
    "NOT_IMPLEMENTED",
    "QUEUE_ARGUMENTS",
    "QUEUE_TYPE_MODULES",
    "check_consume_arguments",
    "check_exchange_arguments",
    "check_queue_arguments",
    "is_stream",
    "queue_type_named",
]

_NOT_OURS: Final = "not implemented by Starlight for RabbitMQ"

# Each queue type's known declare arguments, in RabbitMQ's order (capabilities()
# queue_arguments of rabbit_classic_queue, rabbit_quorum_queue, rabbit_stream_queue). RabbitMQ
# uses the same list to validate a declare and to compare a redeclare (entities.py).
QUEUE_ARGUMENTS: Final[Mapping[str, tuple[str, ...]]] = {
    "classic": (
        "x-expires",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-priority",
        "x-overflow",
        "x-queue-mode",
        "x-queue-version",
        "x-single-active-consumer",
        "x-queue-type",
        "x-queue-master-locator",
        "x-queue-leader-locator",
    ),
    "quorum": (
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-max-in-memory-length",
        "x-max-in-memory-bytes",
        "x-overflow",
        "x-single-active-consumer",
        "x-queue-type",
        "x-quorum-initial-group-size",
        "x-member-placement-tag",
        "x-delivery-limit",
        "x-message-ttl",
        "x-queue-leader-locator",
        "x-consumer-disconnected-timeout",
        "x-consumer-timeout",
        "x-delayed-retry-type",
        "x-delayed-retry-min",
        "x-delayed-retry-max",
    ),
    "stream": (
        "x-max-length-bytes",
        "x-queue-type",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    ),
}
CONSUMER_ARGUMENTS: Final[Mapping[str, frozenset[str]]] = {
    "classic": frozenset({"x-priority"}),
    "quorum": frozenset({"x-priority", "x-consumer-timeout"}),
    "stream": frozenset({"x-stream-offset", "x-stream-filter", "x-stream-match-unfiltered"}),
}
# How RabbitMQ names the types in its messages (the queue type modules).
QUEUE_TYPE_MODULES: Final[Mapping[str, str]] = {
    "classic": "rabbit_classic_queue",
    "quorum": "rabbit_quorum_queue",
    "stream": "rabbit_stream_queue",
}
_TYPE_ALIASES: Final = {module: name for name, module in QUEUE_TYPE_MODULES.items()}

# Accepted, and without effect: what they change in RabbitMQ cannot be seen over AMQP, or
# RabbitMQ itself ignores them.
ACCEPTED_WITHOUT_EFFECT: Final[Mapping[str, str]] = {
    "x-queue-type": "classic, quorum and stream queues; Pulsar replicates every topic",
    "x-queue-mode": "ignored by RabbitMQ since 3.12; Pulsar keeps messages on disk (lazy)",
    "x-queue-version": "a classic queue's storage format",
    "x-queue-master-locator": "replica placement (Pulsar places topics on brokers)",
    "x-queue-leader-locator": "replica placement (Pulsar places topics on brokers)",
    "x-quorum-initial-group-size": "replication factor (set per namespace in Pulsar)",
    "x-member-placement-tag": "replica placement (Pulsar places topics on brokers)",
    "x-max-in-memory-length": "memory tuning, unused by RabbitMQ since 3.10",
    "x-max-in-memory-bytes": "memory tuning, unused by RabbitMQ since 3.10",
}
# A stream's own arguments (docs/compatibility.md, "Stream queues"): retention is
# implemented on the stream's Pulsar topic; segment and Bloom filter sizes and the replica
# count are accepted and validated, without effect (Pulsar stores and replicates the topic).
STREAM_ARGUMENTS: Final = frozenset(
    {
        "x-max-length-bytes",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes",
        "x-initial-cluster-size",
    }
)
# Known to RabbitMQ, changing what it does, and implemented here (docs/compatibility.md).
IMPLEMENTED: Final = frozenset(
    {
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-message-ttl",
        "x-max-length",
        "x-max-length-bytes",
        "x-overflow",
        "x-expires",
        "x-max-priority",
        "x-single-active-consumer",
    }
)
# Known to RabbitMQ, changing what it does, and not implemented here: refused.
NOT_IMPLEMENTED: Final = frozenset(
    set().union(*QUEUE_ARGUMENTS.values()) - set(ACCEPTED_WITHOUT_EFFECT) - IMPLEMENTED
)
# Consumer priorities (x-priority) are implemented (model/consumers.py); a backend that cannot
# honour them refuses them itself.
_CONSUMER_NOT_IMPLEMENTED: Final = frozenset(
    set().union(*CONSUMER_ARGUMENTS.values()) - CONSUMER_ARGUMENTS["stream"] - {"x-priority"}
)
# rabbit_stream_queue's declare checks (?MAX_STREAM_MAX_SEGMENT_SIZE is 3 GB).
_MAX_SEGMENT_SIZE: Final = 3_000_000_000
_FILTER_SIZES: Final = range(16, 256)
# Exchange arguments that name an exchange: checked for type when the exchange is created.
_EXCHANGE_NAMES: Final = ("alternate-exchange",)

# rabbit_amqqueue's INTEGER_ARG_TYPES: byte, short, signedint, long and the unsigned ones
# (not unsignedlong).
_INTEGER_KINDS: Final = frozenset("bsIlBui")
_MAX_PRIORITY: Final = 255
_MAX_EXPIRY: Final = 315_360_000_000  # rabbit_misc:check_expiry, ten years in milliseconds
_OVERFLOW_MODES: Final = ("drop-head", "reject-publish", "reject-publish-dlx")
_DLX_STRATEGIES: Final = ("at-most-once", "at-least-once")
_LEADER_LOCATORS: Final = ("client-local", "balanced", "random", "least-leaders", "min-masters")


def _text(field: Field) -> str:
    value = field.value
    return value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")


def _quoted(text: str) -> str:
    """An Erlang string as ``~p`` prints it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# A validator returns None, or the reason as RabbitMQ prints it (an Erlang term).
Validator = Callable[[Field, Mapping[str, Field]], str | None]


def _int(field: Field, _args: Mapping[str, Field]) -> str | None:
    if field.kind in _INTEGER_KINDS:
        return None
    return _quoted(f"expected integer, got {type_name(field.kind)}")


def _non_negative(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _int(field, args)
    if error is None and field.value < 0:
        return f"{{value_negative,{field.value}}}"
    return error


def _expiry(value: int) -> str | None:
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > _MAX_EXPIRY:
        return f"{{value_too_large,{value}}}"
    return None


def _expires(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _int(field, args)
    if error is not None:
        return error
    if field.value == 0:
        return "{value_zero,0}"
    return _expiry(field.value)


def _message_ttl(field: Field, args: Mapping[str, Field]) -> str | None:
    return _int(field, args) or _expiry(field.value)


def _max_priority(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _non_negative(field, args)
    if error is None and field.value > _MAX_PRIORITY:
        return f"{{max_value_exceeded,{field.value}}}"
    return error


def _positive(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _non_negative(field, args)
    if error is None and field.value == 0:
        return "{value_zero,0}"
    return error


def _bool(field: Field, _args: Mapping[str, Field]) -> str | None:
    return None if field.kind == "t" else f"{{unacceptable_type,{type_name(field.kind)}}}"


def _string(field: Field, _args: Mapping[str, Field]) -> str | None:
    return None if field.kind == "S" else f"{{unacceptable_type,{type_name(field.kind)}}}"


def _dlx_routing_key(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _string(field, args)
    if error is None and "x-dead-letter-exchange" not in args:
        return "routing_key_but_no_dlx_defined"
    return error


def _one_of(values: tuple[str, ...], error: str) -> Validator:
    def check(field: Field, args: Mapping[str, Field]) -> str | None:
        if field.kind != "S":
            return f"{{unacceptable_type,{type_name(field.kind)}}}"
        return None if _text(field) in values else error

    return check


def _queue_version(field: Field, args: Mapping[str, Field]) -> str | None:
    # RabbitMQ 3.13 accepts 1 and 2 (4.x only 2); both are storage formats.
    error = _non_negative(field, args)
    if error is None and field.value not in (1, 2):
        return _quoted(f"unsupported queue version '{field.value}'")
    return error


def _max_age(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _string(field, args)
    if error is not None:
        return error
    return None if max_age_ms(_text(field)) is not None else "invalid_max_age"


def _placement_tag(field: Field, args: Mapping[str, Field]) -> str | None:
    error = _string(field, args)
    if error is None and not _text(field):
        return "invalid_member_placement_tag_arg"
    return error


# declare_args(), in RabbitMQ's order (x-queue-type is checked first, separately).
_DECLARE_VALIDATORS: Final[tuple[tuple[str, Validator], ...]] = (
    ("x-expires", _expires),
    ("x-message-ttl", _message_ttl),
    ("x-dead-letter-exchange", _string),
    ("x-dead-letter-routing-key", _dlx_routing_key),
    ("x-dead-letter-strategy", _one_of(_DLX_STRATEGIES, "invalid_dlx_strategy")),
    ("x-max-length", _non_negative),
    ("x-max-length-bytes", _non_negative),
    ("x-max-in-memory-length", _non_negative),
    ("x-max-in-memory-bytes", _non_negative),
    ("x-max-priority", _max_priority),
    ("x-overflow", _one_of(_OVERFLOW_MODES, "invalid_overflow")),
    ("x-queue-version", _queue_version),
    ("x-single-active-consumer", _bool),
    ("x-consumer-timeout", _non_negative),
    ("x-consumer-disconnected-timeout", _non_negative),
    ("x-quorum-initial-group-size", _positive),
    ("x-max-age", _max_age),
    ("x-stream-max-segment-size-bytes", _non_negative),
    ("x-stream-filter-size-bytes", _non_negative),
    ("x-initial-cluster-size", _positive),
    ("x-queue-leader-locator", _one_of(_LEADER_LOCATORS, "invalid_queue_locator_arg")),
    ("x-member-placement-tag", _placement_tag),
)
_CONSUME_VALIDATORS: Final[tuple[tuple[str, Validator], ...]] = (
    ("x-priority", _int),
    ("x-consumer-timeout", _non_negative),
)


def _invalid(key: str, where: str, reason: str) -> ChannelError:
    return ChannelError(ReplyCode.PRECONDITION_FAILED, f"invalid arg '{key}' for {where}: {reason}")


def is_stream(arguments: Mapping[str, Field]) -> bool:
    """Whether a queue declared with ``arguments`` is a stream."""
    return "x-queue-type" in arguments and queue_type_named(arguments) == "stream"


def queue_type_named(arguments: Mapping[str, Field]) -> str:
    """The queue type of validated ``arguments``: ``classic``, ``quorum`` or ``stream``."""
    field = arguments.get("x-queue-type")
    if field is None or field.kind != "S":
        return "classic"
    name = _text(field)
    return _TYPE_ALIASES.get(name, name) if name not in ("", "undefined") else "classic"


def _check_queue_type(arguments: Mapping[str, Field], where: str) -> str:
    field = arguments.get("x-queue-type")
    if field is None:
        return "classic"
    if field.kind != "S":
        raise _invalid("x-queue-type", where, f"{{unacceptable_type,{type_name(field.kind)}}}")
    name = queue_type_named(arguments)
    if name not in QUEUE_ARGUMENTS:
        raise _invalid("x-queue-type", where, _quoted(f"unsupported queue type '{_text(field)}'"))
    return name


def _only_other_types(known: Mapping[str, Collection[str]]) -> Mapping[str, frozenset[str]]:
    """Per queue type of ``known``: the arguments that only other types take."""
    every = frozenset().union(*known.values())
    return {queue_type: every - frozenset(keys) for queue_type, keys in known.items()}


def _check_known(
    arguments: Mapping[str, Field],
    where: str,
    queue_type: str,
    known: Mapping[str, Collection[str]],
    only_other_types: Mapping[str, frozenset[str]],
    validators: tuple[tuple[str, Validator], ...],
) -> None:
    """RabbitMQ's checks: each argument of the type valid, none of another type only
    (``only_other_types``: ``known``'s, from :func:`_only_other_types`)."""
    if not arguments:
        return
    of_type = known[queue_type]
    for key, validate in validators:
        field = arguments.get(key)
        if field is not None and key in of_type:
            reason = validate(field, arguments)
            if reason is not None:
                raise _invalid(key, where, reason)
    elsewhere = only_other_types[queue_type]
    for key in arguments:
        if key in elsewhere:
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED,
                f"invalid arg '{key}' for {where} of queue type {QUEUE_TYPE_MODULES[queue_type]}",
            )


_DECLARE_ONLY_OTHER_TYPES: Final = _only_other_types(QUEUE_ARGUMENTS)
_CONSUME_ONLY_OTHER_TYPES: Final = _only_other_types(CONSUMER_ARGUMENTS)


def check_queue_arguments(
    where: str,
    arguments: Mapping[str, Field],
    *,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
    backend_refuses: Mapping[str, str] | None = None,
) -> None:
    """Queue.Declare (not passive): 406 unless RabbitMQ would accept ``arguments`` and the
    gateway implements what they ask. ``where`` is ``queue 'q' in vhost '/'``; ``durable`` is
    the queue's as recorded (an exclusive queue is never durable); ``backend_refuses``: the
    classic and quorum queue arguments the backend does not implement, with why."""
    dlx = arguments.get("x-dead-letter-exchange")
    if dlx is not None and dlx.kind != "S":  # rabbit_channel checks it first
        raise _invalid_type("x-dead-letter-exchange", where, dlx)
    queue_type = _check_queue_type(arguments, where)
    _check_known(
        arguments,
        where,
        queue_type,
        QUEUE_ARGUMENTS,
        _DECLARE_ONLY_OTHER_TYPES,
        _DECLARE_VALIDATORS,
    )
    implemented = STREAM_ARGUMENTS if queue_type == "stream" else frozenset()
    for key in arguments:
        if key in NOT_IMPLEMENTED and key not in implemented:
            raise _invalid(key, where, _NOT_OURS)
        if backend_refuses and key in backend_refuses and queue_type != "stream":
            raise _invalid(key, where, backend_refuses[key])
    if queue_type in ("quorum", "stream"):
        # rabbit_quorum_queue:declare / rabbit_stream_queue:declare, via
        # rabbit_queue_type_util, in this order.
        for refused, prop in ((auto_delete, "auto-delete"), (exclusive, "exclusive-owner")):
            if refused:
                raise ChannelError(
                    ReplyCode.PRECONDITION_FAILED, f"invalid property '{prop}' for {where}"
                )
        if not durable:
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED, f"invalid property 'non-durable' for {where}"
            )
    if queue_type == "stream":
        _check_stream_sizes(arguments)


def _check_stream_sizes(arguments: Mapping[str, Field]) -> None:
    """rabbit_stream_queue:declare's own checks, after the properties (its texts, the
    double space included)."""
    segment = arguments.get("x-stream-max-segment-size-bytes")
    if segment is not None and segment.value > _MAX_SEGMENT_SIZE:
        raise ChannelError(
            ReplyCode.PRECONDITION_FAILED, "Exceeded max value for x-stream-max-segment-size-bytes"
        )
    bloom = arguments.get("x-stream-filter-size-bytes")
    if bloom is not None and bloom.value not in _FILTER_SIZES:
        raise ChannelError(
            ReplyCode.PRECONDITION_FAILED, "Invalid value for  x-stream-filter-size-bytes"
        )


def check_consume_arguments(
    where: str, queue_arguments: Mapping[str, Field], arguments: Mapping[str, Field]
) -> None:
    """Basic.Consume on a queue declared with ``queue_arguments``: RabbitMQ's checks, then
    406 for consumer arguments the gateway does not implement (``x-consumer-timeout``). A stream's
    own (``x-stream-offset``, ``x-stream-filter``, …) are checked where they are read
    (model/streams.py)."""
    queue_type = queue_type_named(queue_arguments)
    if queue_type not in CONSUMER_ARGUMENTS:
        queue_type = "classic"
    _check_known(
        arguments,
        where,
        queue_type,
        CONSUMER_ARGUMENTS,
        _CONSUME_ONLY_OTHER_TYPES,
        _CONSUME_VALIDATORS,
    )
    for key in arguments:
        if key in _CONSUMER_NOT_IMPLEMENTED:
            raise _invalid(key, where, _NOT_OURS)


def check_exchange_arguments(where: str, arguments: Mapping[str, Field]) -> None:
    """Exchange.Declare creating an exchange (RabbitMQ checks the argument only then; a
    redeclare is checked for equivalence): ``alternate-exchange`` must be a longstr
    (``rabbit_misc:r_arg``); it is implemented. Other arguments mean nothing to RabbitMQ's
    built-in exchange types and are kept, as there."""
    for key in _EXCHANGE_NAMES:
        field = arguments.get(key)
        if field is not None and field.kind != "S":
            raise _invalid_type(key, where, field)


def _invalid_type(key: str, where: str, field: Field) -> ChannelError:
    """rabbit_channel's check of an argument naming an exchange (``rabbit_misc:r_arg``)."""
    return ChannelError(
        ReplyCode.PRECONDITION_FAILED,
        f"invalid type '{type_name(field.kind)}' for arg '{key}' in {where}",
    )
