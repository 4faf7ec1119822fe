"""An AMQP message as a Pulsar message, and back.

The body is the payload. The AMQP content properties travel twice:

- exactly, as the raw property bytes (base64) in ``amqp-properties``, which the gateway replays
  byte for byte on delivery, so every value keeps its AMQP type whatever it is;
- readably, for native Pulsar consumers: each set basic property as a string property with a
  dash-separated name (``content-type``, ``correlation-id``, ...) and each header as
  ``header.<name>`` (strings as they are, other types printed).

A message from a native Pulsar producer has no ``amqp-properties``: its content type and
headers are rebuilt from the readable properties (every other Pulsar property becomes a
longstr header) so AMQP consumers see what a native application meant to send.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Final, TypeVar

from gateway.amqp.fieldtable import Field, field_to_plain
from gateway.amqp.properties import MessageProperties, encode_properties
from gateway.backend.interface import Message
from gateway.bounded import remember

K = TypeVar("K", bytes, str)
V = TypeVar("V")

RAW_PROPERTIES: Final = "amqp-properties"
EXCHANGE: Final = "amqp-exchange"
ROUTING_KEY: Final = "amqp-routing-key"
# On a copy written by the gateway to requeue one message of a batch (delivery.py): the copy
# is delivered with redelivered=true.
REQUEUED: Final = "amqp-requeued"
# On such a copy: when the original entered the queue (ms), so that requeueing keeps its TTL.
ENQUEUED: Final = "amqp-enqueued"
# On a message some full queues refused (x-overflow reject-publish): their names (JSON list);
# their consumers skip it, the other queues it was routed to deliver it.
REFUSED_BY: Final = "amqp-refused-by"
HEADER_PREFIX: Final = "header."
_EMPTY_PROPERTIES: Final = b"\x00\x00"

# Basic properties shown to native consumers, under these names.
_READABLE: Final = (
    ("content_type", "content-type"),
    ("content_encoding", "content-encoding"),
    ("delivery_mode", "delivery-mode"),
    ("priority", "priority"),
    ("correlation_id", "correlation-id"),
    ("reply_to", "reply-to"),
    ("expiration", "expiration"),
    ("message_id", "message-id"),
    ("timestamp", "timestamp"),
    ("type", "type"),
    ("user_id", "user-id"),
    ("app_id", "app-id"),
)
_ATTRIBUTE_FOR: Final = {readable: attribute for attribute, readable in _READABLE}
_OURS: Final = frozenset({RAW_PROPERTIES, EXCHANGE, ROUTING_KEY, REQUEUED, ENQUEUED, REFUSED_BY})


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _header_text(field: Field) -> str:
    plain = field_to_plain(field)
    return _text(plain)


def to_pulsar(message: Message) -> dict[str, str]:
    """The Pulsar properties of ``message`` (the payload is ``message.body``)."""
    properties = {EXCHANGE: message.exchange, ROUTING_KEY: message.routing_key}
    if message.header == _EMPTY_PROPERTIES:
        return properties  # the common case in load tests: nothing to decode
    # Applications send the same few property sets over and over (a content type, persistent
    # delivery): their Pulsar form is computed once, which was ~15% of the publish path.
    header = message.header
    described = _described.get(header)
    if described is None:
        described = _describe(message)
        _remember(_described, header, described)
    properties.update(described)
    return properties


# Header bytes -> their Pulsar properties (all but exchange and routing key), and back: the
# same few headers come by again and again.
_described: dict[bytes, dict[str, str]] = {}
_raw_headers: dict[str, bytes] = {}
_CACHED_HEADERS: Final = 1024
_CACHED_HEADER_MAX: Final = 512


def _remember(cache: dict[K, V], key: K, value: V) -> None:
    """Keep ``key -> value`` in one of the header caches (small headers only)."""
    if len(key) <= _CACHED_HEADER_MAX:
        remember(cache, key, value, _CACHED_HEADERS)


def _describe(message: Message) -> dict[str, str]:
    described = {RAW_PROPERTIES: base64.b64encode(message.header).decode("ascii")}
    decoded = message.properties
    for attribute, readable in _READABLE:
        value = getattr(decoded, attribute)
        if value is not None:
            described[readable] = _text(value)
    for name, field in (decoded.headers or {}).items():
        described[HEADER_PREFIX + name] = _header_text(field)
    return described


def from_pulsar(
    payload: bytes, properties: Mapping[str, str], exchange: str, routing_key: str
) -> Message:
    """The AMQP message for a Pulsar message; ``exchange``/``routing_key`` are used when the
    producer was not the gateway (they come from the topic's name)."""
    raw = properties.get(RAW_PROPERTIES)
    exchange = properties.get(EXCHANGE, exchange)
    routing_key = properties.get(ROUTING_KEY, routing_key)
    if raw is not None:
        header = _raw_headers.get(raw)
        if header is None:
            header = base64.b64decode(raw)
            _remember(_raw_headers, raw, header)
        return Message(exchange, routing_key, header, payload)
    if EXCHANGE in properties:
        return Message(exchange, routing_key, _EMPTY_PROPERTIES, payload)
    return Message(exchange, routing_key, _native_properties(properties), payload)


def _native_properties(properties: Mapping[str, str]) -> bytes:
    values: dict[str, object] = {}
    headers: dict[str, Field] = {}
    for name, value in properties.items():
        if name in _OURS:
            continue
        if name.startswith(HEADER_PREFIX):
            headers[name[len(HEADER_PREFIX) :]] = Field("S", value)
        elif name in ("content-type", "content-encoding", "correlation-id", "message-id"):
            values[_ATTRIBUTE_FOR[name]] = value
        else:
            headers[name] = Field("S", value)
    if headers:
        values["headers"] = headers
    return encode_properties(MessageProperties(**values))  # type: ignore[arg-type]


def refused_by(properties: Mapping[str, str]) -> list[str]:
    """The queues that refused a message (written for others), from its Pulsar properties."""
    raw = properties.get(REFUSED_BY)
    if raw is None:
        return []
    try:
        names = json.loads(raw)
    except ValueError:
        return []
    return [str(name) for name in names] if isinstance(names, list) else []
