"""The data of each znode: small JSON documents, with AMQP arguments kept exactly.

Arguments are field tables whose values carry their AMQP type (``Field(kind, value)``); JSON
has no way to say "unsigned 16-bit" or "decimal with scale 3", so a table is stored as the
base64 of its wire encoding (``encode_table``), which ``decode_table`` turns back into the same
typed values. Entities are immutable once stored (a redeclare never changes a node: an
equivalent redeclare is a no-op and an inequivalent one is refused), so these documents are
written once and never updated in place.

Every document has ``"v": 1``; a reader refuses versions it does not know instead of guessing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final, NamedTuple

from gateway.amqp.fieldtable import Field, decode_table, encode_table
from gateway.metadata.paths import (
    SEPARATOR,
    decode_binding_id,
    decode_exchange_binding_id,
    decode_name,
    decode_topic_key,
    encode_binding_id,
    encode_exchange_binding_id,
    encode_name,
    encode_topic_key,
    plain_binding_id,
)
from gateway.metadata.values import DrainRecord, Position
from gateway.model.consumers import LinePlace
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue
from gateway.model.graph import RouteSnapshot

__all__ = [
    "EXCLUSIVE_MARK",
    "FORMAT_VERSION",
    "ConsumerKey",
    "DrainKey",
    "OwnerKey",
    "TopicKey",
    "arguments_digest",
    "binding_from_child",
    "binding_id",
    "consumer_child",
    "consumer_from_child",
    "decode_binding",
    "decode_drain",
    "decode_exchange",
    "decode_exchange_binding",
    "decode_queue",
    "drain_child",
    "drain_from_child",
    "encode_binding",
    "encode_drain",
    "encode_exchange",
    "encode_exchange_binding",
    "encode_owner",
    "encode_queue",
    "exchange_binding_from_child",
    "exchange_binding_id",
    "is_consumed",
    "line_child",
    "mark_consumed",
    "namespace_document",
    "owner_child",
    "owner_from_child",
    "topic_key_child",
    "topic_key_from_child",
]

FORMAT_VERSION: Final = 1
_COMPACT: Final = {"separators": (",", ":"), "ensure_ascii": True}


class TopicKey(NamedTuple):
    exchange: str
    routing_key: str


class OwnerKey(NamedTuple):
    """An exclusive queue's live owner (the znode's name says which queue)."""

    queue: str


class ConsumerKey(NamedTuple):
    """One registered consumer of ``queue``; ``serial`` None is the exclusive consumer.
    ``place`` is set for a consumer of a single-active-consumer queue: its place in the
    queue's line (model/consumers.py)."""

    queue: str
    replica: str
    serial: int | None
    place: LinePlace | None = None


class DrainKey(NamedTuple):
    queue: str
    topic: str
    record: DrainRecord


# The name of a queue's exclusive consumer record, after "<queue>,": one per queue, so that
# two exclusive consumers on two replicas collide on creating it.
EXCLUSIVE_MARK: Final = "!"
# The last part of a single-active-consumer queue's consumer record: waiting, or active.
_LINE_STATES: Final = {"w": False, "a": True}


# ------------------------------------------------------------------------------ arguments


def _canonical(field: Field) -> Field:
    # Tables compare equal whatever their key order (they are dicts), so the digest must not
    # depend on it either; arrays are ordered.
    if field.kind == "F":
        return Field("F", {key: _canonical(field.value[key]) for key in sorted(field.value)})
    if field.kind == "A":
        return Field("A", [_canonical(item) for item in field.value])
    return field


def arguments_digest(arguments: Mapping[str, Field]) -> str | None:
    """A 128-bit digest of the arguments' exact (typed) encoding, key order aside; None when
    there are none. Two bindings differing only in arguments are distinct bindings (RabbitMQ
    compares binding arguments as terms, types included), and the digest tells them apart in
    their znode names."""
    if not arguments:
        return None
    table = {key: _canonical(arguments[key]) for key in sorted(arguments)}
    digest = hashlib.blake2b(encode_table(table), digest_size=16).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _pack_arguments(document: dict[str, Any], arguments: Mapping[str, Field]) -> None:
    if arguments:
        document["arguments"] = base64.b64encode(encode_table(arguments)).decode("ascii")


def _unpack_arguments(document: Mapping[str, Any]) -> dict[str, Field]:
    packed = document.get("arguments")
    if packed is None:
        return {}
    if not isinstance(packed, str):
        raise ValueError("'arguments' is not a base64 string")
    raw = base64.b64decode(packed, validate=True)
    table, end = decode_table(raw)
    if end != len(raw):
        raise ValueError("trailing bytes after the arguments table")
    return table


def _dump(document: dict[str, Any]) -> bytes:
    return json.dumps(document, **_COMPACT).encode("ascii")  # type: ignore[arg-type]


def _load(data: bytes) -> dict[str, Any]:
    document = json.loads(data)
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    if document.get("v") != FORMAT_VERSION:
        raise ValueError(f"unknown document version {document.get('v')!r}")
    return document


def _flag(document: Mapping[str, Any], key: str) -> bool:
    value = document.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key!r} is not a boolean")
    return value


# ------------------------------------------------------------------------------ entities


def encode_exchange(exchange: Exchange) -> bytes:
    document: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "type": exchange.type.value,
        "durable": exchange.durable,
        "auto_delete": exchange.auto_delete,
        "internal": exchange.internal,
    }
    _pack_arguments(document, exchange.arguments)
    return _dump(document)


def decode_exchange(child: str, data: bytes) -> Exchange:
    document = _load(data)
    return Exchange(
        decode_name(child),
        ExchangeType(document["type"]),
        durable=_flag(document, "durable"),
        auto_delete=_flag(document, "auto_delete"),
        internal=_flag(document, "internal"),
        arguments=_unpack_arguments(document),
    )


def encode_queue(queue: Queue) -> bytes:
    document: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "durable": queue.durable,
        "exclusive": queue.exclusive,
        "auto_delete": queue.auto_delete,
    }
    if queue.owner is not None:
        document["owner"] = queue.owner
    _pack_arguments(document, queue.arguments)
    return _dump(document)


def decode_queue(child: str, data: bytes) -> Queue:
    return _named(_queue_template(data), decode_name(child))


# Most queues of a vhost share one of a few documents (durable, no arguments, ...): each
# distinct document is parsed (and checked, by Queue's constructor) once, into a nameless
# template. The arguments table is shared between queues but never modified (read-only).
@lru_cache(maxsize=1024)
def _queue_template(data: bytes) -> Queue:
    document = _load(data)
    owner = document.get("owner")
    if owner is not None and not isinstance(owner, str):
        raise ValueError("'owner' is not a string")
    return Queue(
        "",
        _flag(document, "durable"),
        _flag(document, "exclusive"),
        _flag(document, "auto_delete"),
        _unpack_arguments(document),
        owner,
    )


# A frozen dataclass's constructor sets each field through object.__setattr__, and its
# __post_init__ the arguments again: a million queues and a million bindings made that way
# were ~15% of a million-queue load. These set the slots directly, with values a constructor
# already checked (the template's) or that need no check (a binding without arguments).
_new = object.__new__
_QUEUE: Final[dict[str, Any]] = dict(vars(Queue))
_BINDING: Final[dict[str, Any]] = dict(vars(Binding))
_queue_name = _QUEUE["name"].__set__
_queue_durable = _QUEUE["durable"].__set__
_queue_exclusive = _QUEUE["exclusive"].__set__
_queue_auto_delete = _QUEUE["auto_delete"].__set__
_queue_arguments = _QUEUE["arguments"].__set__
_queue_owner = _QUEUE["owner"].__set__
_binding_queue = _BINDING["queue"].__set__
_binding_exchange = _BINDING["exchange"].__set__
_binding_key = _BINDING["routing_key"].__set__
_binding_args = _BINDING["arguments"].__set__
_NO_ARGUMENTS: Final = Binding("", "").arguments


def _named(template: Queue, name: str) -> Queue:
    """``template`` with ``name``: equal to ``dataclasses.replace(template, name=name)``."""
    queue: Queue = _new(Queue)
    _queue_name(queue, name)
    _queue_durable(queue, template.durable)
    _queue_exclusive(queue, template.exclusive)
    _queue_auto_delete(queue, template.auto_delete)
    _queue_arguments(queue, template.arguments)
    _queue_owner(queue, template.owner)
    return queue


def _plain_binding(queue: str, exchange: str, routing_key: str) -> Binding:
    """``Binding(queue, exchange, routing_key)``, without its constructor."""
    binding: Binding = _new(Binding)
    _binding_queue(binding, queue)
    _binding_exchange(binding, exchange)
    _binding_key(binding, routing_key)
    _binding_args(binding, _NO_ARGUMENTS)
    return binding


def binding_id(binding: Binding) -> str:
    """The binding's znode name, which is also its identity in the store."""
    return encode_binding_id(
        binding.queue, binding.exchange, binding.routing_key, arguments_digest(binding.arguments)
    )


def encode_binding(binding: Binding | ExchangeBinding) -> bytes:
    """A binding's node data (a queue's or an exchange's): its arguments, if any."""
    document: dict[str, Any] = {"v": FORMAT_VERSION}
    _pack_arguments(document, binding.arguments)
    return _dump(document)


def _binding_arguments(child: str, data: bytes, digest: str | None) -> dict[str, Field]:
    """A binding node's arguments, checked against the digest its name carries."""
    arguments = _unpack_arguments(_load(data)) if data else {}
    if arguments_digest(arguments) != digest:
        raise ValueError(f"binding {child!r}: its arguments do not match the digest in its name")
    return arguments


def binding_from_child(child: str) -> Binding | None:
    """The binding named ``child`` when the name says everything (no arguments); None when its
    arguments must be read from the node."""
    plain = plain_binding_id(child)
    if plain is not None:
        return _plain_binding(*plain)
    parsed = decode_binding_id(child)
    if parsed.arguments_digest is not None:
        return None
    return Binding(parsed.queue, parsed.exchange, parsed.routing_key)


def decode_binding(child: str, data: bytes) -> Binding:
    parsed = decode_binding_id(child)
    arguments = _binding_arguments(child, data, parsed.arguments_digest)
    return Binding(parsed.queue, parsed.exchange, parsed.routing_key, arguments)


def exchange_binding_id(binding: ExchangeBinding) -> str:
    """The exchange binding's znode name (and the name of its refs under both exchanges)."""
    return encode_exchange_binding_id(
        binding.source,
        binding.destination,
        binding.routing_key,
        arguments_digest(binding.arguments),
    )


encode_exchange_binding = encode_binding


def exchange_binding_from_child(child: str) -> ExchangeBinding | None:
    """The exchange binding named ``child`` when it has no arguments; None otherwise."""
    parsed = decode_exchange_binding_id(child)
    if parsed.arguments_digest is not None:
        return None
    return ExchangeBinding(parsed.source, parsed.destination, parsed.routing_key)


def decode_exchange_binding(child: str, data: bytes) -> ExchangeBinding:
    parsed = decode_exchange_binding_id(child)
    arguments = _binding_arguments(child, data, parsed.arguments_digest)
    return ExchangeBinding(parsed.source, parsed.destination, parsed.routing_key, arguments)


def topic_key_child(exchange: str, routing_key: str) -> str:
    return encode_topic_key(exchange, routing_key)


def topic_key_from_child(child: str) -> TopicKey:
    exchange, key = decode_topic_key(child)
    return TopicKey(exchange, key)


def namespace_document(buckets: int) -> bytes:
    """The namespace node's data: the layout parameters a reader must agree with."""
    return _dump({"v": FORMAT_VERSION, "buckets": buckets})


# ------------------------------------------------------------------------------ queue state
#
# Records about a queue live in folders of their own (owners, consumers, drains), named after
# the queue first so that they share its bucket (paths.bucket_for).


def owner_child(queue: str) -> str:
    return encode_name(queue)


def owner_from_child(child: str) -> OwnerKey:
    return OwnerKey(decode_name(child))


def encode_owner(replica: str, connection: str) -> bytes:
    """The owner record's data: for people reading zkCli and for logs, not for the gateway
    (the queue's own document names the owning connection)."""
    return _dump({"v": FORMAT_VERSION, "replica": replica, "connection": connection})


def consumer_child(queue: str, replica: str | None, serial: int | None) -> str:
    """``<queue>,<replica>,<serial>``, or ``<queue>,!`` for the exclusive consumer."""
    if replica is None or serial is None:
        return encode_name(queue) + SEPARATOR + EXCLUSIVE_MARK
    return SEPARATOR.join((encode_name(queue), encode_name(replica), str(serial)))


def line_child(queue: str, replica: str, serial: int, place: LinePlace) -> str:
    """A single-active-consumer queue's consumer record:
    ``<queue>,<replica>,<serial>,<sequence>,<priority>,<credit>,<w|a>``, all of its place in
    the name, so that replicas learn it from the name alone. ``place.consumer`` is the record's
    first three parts (``consumer_child``): what stays the same while it waits and is active."""
    state = "a" if place.active else "w"
    numbers = (place.sequence, place.priority, place.credit)
    return SEPARATOR.join((consumer_child(queue, replica, serial), *map(str, numbers), state))


def _integer(text: str) -> int:
    value = int(text)
    if str(value) != text:
        raise ValueError(f"not a canonical integer: {text!r}")
    return value


def consumer_from_child(child: str) -> ConsumerKey:
    parts = child.split(SEPARATOR)
    if len(parts) == 2 and parts[1] == EXCLUSIVE_MARK:
        return ConsumerKey(decode_name(parts[0]), "", None)
    if len(parts) in (3, 7) and parts[2].isdigit() and str(int(parts[2])) == parts[2]:
        queue, replica, serial = decode_name(parts[0]), decode_name(parts[1]), int(parts[2])
        if len(parts) == 3:
            return ConsumerKey(queue, replica, serial)
        if parts[6] in _LINE_STATES:
            sequence, priority, credit = map(_integer, parts[3:6])
            place = LinePlace(
                SEPARATOR.join(parts[:3]),
                replica,
                sequence,
                priority,
                credit,
                _LINE_STATES[parts[6]],
            )
            return ConsumerKey(queue, replica, serial, place)
    raise ValueError(f"not a consumer record: {child!r}")


def queue_of_child(child: str) -> str:
    """The (encoded) queue a record of the owners, consumers or drains folder is about."""
    return child.split(SEPARATOR, 1)[0]


def drain_child(queue: str, topic: str) -> str:
    return encode_name(queue) + SEPARATOR + encode_name(topic)


def drain_from_child(child: str, data: bytes) -> DrainKey:
    queue, separator, topic = child.partition(SEPARATOR)
    if not separator:
        raise ValueError(f"not a drain record: {child!r}")
    return DrainKey(decode_name(queue), decode_name(topic), decode_drain(data))


def _position(value: Any, key: str) -> Position | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(part, int) and not isinstance(part, bool) for part in value)
    ):
        raise ValueError(f"{key!r} is not a [ledger, entry] pair")
    return (value[0], value[1])


def encode_drain(record: DrainRecord) -> bytes:
    if record.end is None:
        return _dump({"v": FORMAT_VERSION, "remove": True})
    document: dict[str, Any] = {"v": FORMAT_VERSION, "end": list(record.end)}
    if record.resumed is not None:
        document["resumed"] = list(record.resumed)
    if record.via:
        document["via"] = [
            {"until": list(until), **_encode_snapshot(snapshot)} for until, snapshot in record.via
        ]
    return _dump(document)


def decode_drain(data: bytes) -> DrainRecord:
    document = _load(data)
    if _flag(document, "remove"):
        return DrainRecord()
    end = _position(document.get("end"), "end")
    if end is None:
        raise ValueError("a drain record without 'end' or 'remove'")
    via = document.get("via", [])
    if not isinstance(via, list):
        raise ValueError("'via' is not a list")
    return DrainRecord(
        end,
        _position(document.get("resumed"), "resumed"),
        tuple(_judged(part) for part in via),
    )


def _judged(part: Any) -> tuple[Position, RouteSnapshot]:
    if not isinstance(part, dict):
        raise ValueError("an entry of 'via' is not an object")
    until = _position(part.get("until"), "until")
    if until is None:
        raise ValueError("an entry of 'via' has no 'until'")
    return until, _decode_snapshot(part)


# A drain's "via": the bindings that routed what it drains, one entry per change of them,
# {"until": [ledger, entry], "exchanges": [[name, type]...],
#  "bindings": [[queue, exchange, key, arguments|null]...],
#  "exchange_bindings": [[source, destination, key, arguments|null]...]}, arguments as in
# entity documents (the base64 of their wire encoding).


def _packed(arguments: Mapping[str, Field]) -> str | None:
    return base64.b64encode(encode_table(arguments)).decode("ascii") if arguments else None


def _unpacked(packed: Any) -> dict[str, Field]:
    return {} if packed is None else _unpack_arguments({"arguments": packed})


def _encode_snapshot(snapshot: RouteSnapshot) -> dict[str, Any]:
    return {
        "exchanges": [[e.name, e.type.value] for e in snapshot.exchanges],
        "bindings": [
            [b.queue, b.exchange, b.routing_key, _packed(b.arguments)] for b in snapshot.bindings
        ],
        "exchange_bindings": [
            [b.source, b.destination, b.routing_key, _packed(b.arguments)]
            for b in snapshot.exchange_bindings
        ],
    }


def _strings(row: Any, count: int, what: str) -> list[Any]:
    if (
        not isinstance(row, list)
        or len(row) != count
        or not all(isinstance(part, str) for part in row[: count - 1 if count == 4 else count])
    ):
        raise ValueError(f"'via' has a malformed {what}: {row!r}")
    return row


def _decode_snapshot(document: Any) -> RouteSnapshot:
    if not isinstance(document, dict):
        raise ValueError("'via' is not an object")
    exchanges = tuple(
        Exchange(name, ExchangeType(kind))
        for name, kind in (_strings(row, 2, "exchange") for row in document.get("exchanges", []))
    )
    bindings = tuple(
        Binding(queue, exchange, key, _unpacked(arguments))
        for queue, exchange, key, arguments in (
            _strings(row, 4, "binding") for row in document.get("bindings", [])
        )
    )
    edges = tuple(
        ExchangeBinding(source, destination, key, _unpacked(arguments))
        for source, destination, key, arguments in (
            _strings(row, 4, "exchange binding") for row in document.get("exchange_bindings", [])
        )
    )
    return RouteSnapshot(exchanges, bindings, edges)


# An auto-delete queue is deleted when its last consumer goes, but never if it never had one
# (rabbit_amqqueue: a queue only consumed with Basic.Get stays). The first consumer marks it
# in the queue's document, so that the leader, which may not have watched that consumer come
# and go (it was elected later), can tell.


def mark_consumed(data: bytes) -> bytes:
    """The queue document with ``"consumed": true`` (the same bytes if already marked)."""
    document = _load(data)
    if document.get("consumed") is True:
        return data
    document["consumed"] = True
    return _dump(document)


def is_consumed(data: bytes) -> bool:
    return _flag(_load(data), "consumed")
