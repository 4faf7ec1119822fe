"""Dead-lettering a message: the headers RabbitMQ writes, and its cycle rule.

What RabbitMQ documents (rabbitmq-website ``docs/dlx.md``, "Dead-Lettered Effects on
Messages", RabbitMQ 3.13/4.x for AMQP 0-9-1 clients):

- the message goes to the queue's dead-letter exchange with the queue's
  ``x-dead-letter-routing-key`` if set, else with the routing key it was published with;
- ``x-death`` is an array of tables, one per ``{queue, reason}`` pair, the most recent event
  first. A new pair is added in front as ``count`` (long) 1, ``reason``, ``queue``, ``time``
  (timestamp, seconds), ``exchange`` and ``routing-keys`` (array of longstr) as the message
  was before this dead-lettering, and ``original-expiration`` when it had an ``expiration``;
  a pair seen before gets ``count`` + 1 and moves to the front, its other fields keeping the
  values of the first time;
- the ``expiration`` property is removed (so the message does not expire again where it goes);
- ``x-first-death-queue``/``-reason``/``-exchange`` are added the first time and never
  changed; ``x-last-death-queue``/``-reason``/``-exchange`` are set every time;
- a message dead-lettered back into a queue it was dead-lettered from, with no rejection in
  the whole cycle, is dropped (automatic loops would run forever).

Reasons: ``rejected``, ``expired``, ``maxlen`` (``delivery_limit`` is a quorum queue's).
Pure functions over ``MessageProperties``; the backends do the publishing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

from gateway.amqp.fieldtable import Field, Table
from gateway.amqp.properties import MessageProperties

__all__ = [
    "DEATH_HEADERS",
    "DeadLetterTarget",
    "Death",
    "Reason",
    "dead_letter_target",
    "dead_lettered",
    "deaths_of",
    "is_cycle",
]

Reason = Literal["rejected", "expired", "maxlen"]

X_DEATH: Final = "x-death"
DEATH_HEADERS: Final = (
    X_DEATH,
    "x-first-death-queue",
    "x-first-death-reason",
    "x-first-death-exchange",
    "x-last-death-queue",
    "x-last-death-reason",
    "x-last-death-exchange",
)


@dataclass(frozen=True)
class Death:
    """One ``x-death`` entry, as far as the gateway reads it back."""

    queue: str
    reason: str


@dataclass(frozen=True)
class DeadLetterTarget:
    """Where a queue's dead letters go: its ``x-dead-letter-exchange`` (``""`` is the default
    exchange) and ``x-dead-letter-routing-key`` (None: the message's own key)."""

    exchange: str
    routing_key: str | None = None


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def dead_letter_target(arguments: Mapping[str, Field]) -> DeadLetterTarget | None:
    """The queue's dead-letter target from its (validated) arguments, or None."""
    exchange = arguments.get("x-dead-letter-exchange")
    if exchange is None:
        return None
    key = arguments.get("x-dead-letter-routing-key")
    return DeadLetterTarget(_text(exchange.value), None if key is None else _text(key.value))


def _entries(headers: Mapping[str, Field] | None) -> list[Table]:
    """The ``x-death`` tables of ``headers`` (anything malformed is left out)."""
    if not headers:
        return []
    field = headers.get(X_DEATH)
    if field is None or field.kind != "A":
        return []
    return [dict(item.value) for item in field.value if item.kind == "F"]


def _entry_text(entry: Mapping[str, Field], key: str) -> str | None:
    field = entry.get(key)
    if field is None or field.kind != "S":
        return None
    return _text(field.value)


def deaths_of(properties: MessageProperties) -> list[Death]:
    """The message's dead-lettering history, most recent first."""
    deaths = []
    for entry in _entries(properties.headers):
        queue, reason = _entry_text(entry, "queue"), _entry_text(entry, "reason")
        if queue is not None and reason is not None:
            deaths.append(Death(queue, reason))
    return deaths


def is_cycle(deaths: Sequence[Death], queue: str) -> bool:
    """Whether dead-lettering a message with history ``deaths`` (just updated, most recent
    first) into ``queue`` closes a cycle with no rejection in it: then RabbitMQ drops it
    (``rabbit_dead_letter`` / ``mc:is_death_cycle``)."""
    for death in deaths:
        if death.reason == "rejected":
            return False
        if death.queue == queue:
            return True
    return False


def dead_lettered(
    properties: MessageProperties,
    *,
    queue: str,
    reason: Reason,
    exchange: str,
    routing_keys: Iterable[str],
    now: int,
) -> MessageProperties:
    """``properties`` of a message dead-lettered from ``queue`` for ``reason`` at ``now``
    (seconds since the epoch); ``exchange`` and ``routing_keys`` are those it carried."""
    headers: Table = dict(properties.headers or {})
    entries = _entries(headers)
    found = None
    for index, entry in enumerate(entries):
        if _entry_text(entry, "queue") == queue and _entry_text(entry, "reason") == reason:
            found = index
            break
    if found is None:
        entry = {
            "count": Field("l", 1),
            "reason": Field("S", reason),
            "queue": Field("S", queue),
            "time": Field("T", now),
            "exchange": Field("S", exchange),
            "routing-keys": Field("A", [Field("S", key) for key in routing_keys]),
        }
        if properties.expiration is not None:
            entry["original-expiration"] = Field("S", _text(properties.expiration))
    else:
        entry = entries.pop(found)
        count = entry.get("count")
        previous = count.value if count is not None and isinstance(count.value, int) else 0
        entry["count"] = Field("l", previous + 1)
    entries.insert(0, entry)
    headers[X_DEATH] = Field("A", [Field("F", table) for table in entries])
    latest = {"queue": queue, "reason": reason, "exchange": exchange}
    for part, value in latest.items():
        headers.setdefault(f"x-first-death-{part}", Field("S", value))
        headers[f"x-last-death-{part}"] = Field("S", value)
    return replace(properties, headers=headers, expiration=None)
