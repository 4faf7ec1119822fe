"""The usage event: what every replica publishes per active vhost, and what the rollup reads.

This module is the contract between the two sides (``gateway/observability`` produces,
``gateway/rollup`` consumes); both import it and nothing else of each other. It is pure: no
Pulsar, no trio, no Spark.

One event covers one vhost on one replica for one window ``[window_start_ms, window_end_ms)``
of wall-clock time (epoch milliseconds). Counters are *deltas* for that window, never running
totals, so the rollup sums them. ``event_id`` is ``"<replica>:<sequence>"``: a replica numbers
its events 0, 1, 2, ... from its start, and its id is unique per process start, so a retried
send of the same event carries the same id and the rollup drops the duplicate.

The wire form is one JSON object per Pulsar message. The topic declares the same structure as
a Pulsar JSON schema (an Avro record definition, :data:`AVRO_SCHEMA`), so native Pulsar tools
see typed fields. Version 1; a reader refuses any other version rather than guessing.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "AVRO_SCHEMA",
    "COUNTER_FIELDS",
    "DEFAULT_TOPIC",
    "SCHEMA_VERSION",
    "MalformedUsageEvent",
    "UsageEvent",
]

SCHEMA_VERSION: Final = 1

#: Where replicas publish unless ``usageEventsTopic`` says otherwise: a namespace of its own,
#: so no vhost's topics mix with it.
DEFAULT_TOPIC: Final = "persistent://public/starlight-system/usage-events"


class MalformedUsageEvent(ValueError):
    """A payload that is not a version-1 usage event; the message says which field is wrong."""


@dataclass(frozen=True, slots=True)
class UsageEvent:
    event_id: str  # "<replica>:<sequence>", unique across the fleet and its restarts
    replica: str  # the replica's id (rabbitmq_node in the metrics)
    sequence: int  # 0, 1, 2, ... per replica process
    vhost: str  # the AMQP vhost name as clients give it
    namespace: str  # the Pulsar "tenant/namespace" the vhost maps to
    window_start_ms: int  # epoch milliseconds, inclusive
    window_end_ms: int  # epoch milliseconds, exclusive
    published_messages: int = 0  # Basic.Publish received (RabbitMQ: messages_received)
    published_bytes: int = 0  # their body bytes
    routed_messages: int = 0  # published and routed to at least one queue
    routed_bytes: int = 0
    delivered_messages: int = 0  # Basic.Deliver + Basic.Get-Ok sent
    delivered_bytes: int = 0
    acknowledged_messages: int = 0  # settled by Basic.Ack (or auto-ack)
    acknowledged_bytes: int = 0
    returned_messages: int = 0  # Basic.Return sent (mandatory, unroutable)
    returned_bytes: int = 0
    connections: int = 0  # open AMQP connections on this vhost at window end
    peak_connections: int = 0  # most open at once during the window
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        _check(self)

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, payload: bytes | str) -> UsageEvent:
        """Parse and validate one event; :class:`MalformedUsageEvent` for anything else."""
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedUsageEvent(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise MalformedUsageEvent("not a JSON object")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise MalformedUsageEvent(f"schema_version {version!r}, expected {SCHEMA_VERSION}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise MalformedUsageEvent(f"unknown field(s): {', '.join(unknown)}")
        missing = sorted(name for name in _REQUIRED if name not in data)
        if missing:
            raise MalformedUsageEvent(f"missing field(s): {', '.join(missing)}")
        return cls(**data)


#: The per-window quantities the rollup sums (or, for the connection counts, takes the most of).
COUNTER_FIELDS: Final = tuple(
    f.name
    for f in dataclasses.fields(UsageEvent)
    if f.default is not dataclasses.MISSING and f.name != "schema_version"
)

_REQUIRED: Final = tuple(
    f.name for f in dataclasses.fields(UsageEvent) if f.default is dataclasses.MISSING
)

_TYPES: Final[dict[str, type]] = {"str": str, "int": int}


def _check(event: UsageEvent) -> None:
    for f in dataclasses.fields(event):
        value = getattr(event, f.name)
        expected = _TYPES[str(f.type)]
        # bool is an int in Python, never a counter here.
        if not isinstance(value, expected) or isinstance(value, bool):
            raise MalformedUsageEvent(f"{f.name}: expected {f.type}, got {value!r}")
        if isinstance(value, int) and value < 0:
            raise MalformedUsageEvent(f"{f.name}: negative ({value})")
    if not event.event_id or not event.replica or not event.namespace:
        raise MalformedUsageEvent("event_id, replica and namespace must not be empty")
    if event.window_end_ms < event.window_start_ms:
        raise MalformedUsageEvent(
            f"window ends ({event.window_end_ms}) before it starts ({event.window_start_ms})"
        )


def _avro_type(annotation: str) -> str:
    return {"str": "string", "int": "long"}[annotation]


#: The Pulsar JSON schema definition of the topic (Pulsar describes JSON schemas as Avro
#: records): what ``pulsar-admin schemas get`` shows for the usage-events topic.
AVRO_SCHEMA: Final[dict[str, Any]] = {
    "type": "record",
    "name": "UsageEvent",
    "namespace": "io.starlight.rabbitmq",
    "fields": [
        {"name": f.name, "type": _avro_type(str(f.type))} for f in dataclasses.fields(UsageEvent)
    ],
}
