"""Message TTL as RabbitMQ defines it (rabbitmq-website ``docs/ttl.md``; ``rabbit_basic``).

- A queue's ``x-message-ttl`` and a message's ``expiration`` property (a string of
  milliseconds) each bound how long a message may stay in a queue; with both, the lower wins.
- A message is expired once it has been in the queue longer than that; expired messages are
  never delivered (Basic.Deliver or Get-Ok) and are dead-lettered with reason ``expired`` when
  the queue has a dead-letter exchange. A requeued message keeps its original expiry.
- TTL 0 expires a message on arrival unless a consumer can take it at once: here, unless it
  reaches a consumer within ``ZERO_TTL_GRACE_MS`` of entering the queue (the hand-over from
  Pulsar takes a few milliseconds, which RabbitMQ's in-process queue does not).
- A publish with an ``expiration`` that is not a non-negative integer of at most ten years is
  refused: 406 ``invalid expiration '<value>': <reason>`` (``rabbit_channel``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from gateway.amqp.fieldtable import Field

__all__ = [
    "MAX_EXPIRY_MS",
    "ZERO_TTL_GRACE_MS",
    "effective_ttl",
    "expiration_error",
    "is_expired",
    "parse_expiration",
    "queue_expires",
    "queue_message_ttl",
]

MAX_EXPIRY_MS: Final = 315_360_000_000  # rabbit_misc:check_expiry, ten years
ZERO_TTL_GRACE_MS: Final = 100
_LEADING_INTEGER: Final = re.compile(r"[+-]?[0-9]+")


def expiration_error(text: str) -> str | None:
    """Why ``text`` is not a valid ``expiration`` (the Erlang term RabbitMQ prints), or None.
    ``string:to_integer`` reads a leading integer: ``"10x"`` is ``{leftover_string,"x"}``."""
    match = _LEADING_INTEGER.match(text)
    if match is None:
        return "no_integer"
    value = int(match.group())
    rest = text[match.end() :]
    if rest:
        escaped = rest.replace("\\", "\\\\").replace('"', '\\"')
        return f'{{leftover_string,"{escaped}"}}'
    if value < 0:
        return f"{{value_negative,{value}}}"
    if value > MAX_EXPIRY_MS:
        return f"{{value_too_large,{value}}}"
    return None


def parse_expiration(text: str | bytes | None) -> int | None:
    """The TTL in milliseconds an ``expiration`` property asks for; None when absent or not
    valid (a publish with an invalid one is refused, so only native Pulsar producers get
    here with one)."""
    if text is None:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if expiration_error(text) is not None:
        return None
    return int(text)


def queue_message_ttl(arguments: Mapping[str, Field]) -> int | None:
    """A queue's ``x-message-ttl`` (validated at declare), or None."""
    field = arguments.get("x-message-ttl")
    return None if field is None else int(field.value)


def queue_expires(arguments: Mapping[str, Field]) -> int | None:
    """A queue's ``x-expires`` in milliseconds (validated at declare: positive), or None."""
    field = arguments.get("x-expires")
    return None if field is None else int(field.value)


def effective_ttl(queue_ttl: int | None, expiration: str | bytes | None) -> int | None:
    """The TTL that applies to a message in a queue: the lower of the two, if any."""
    per_message = parse_expiration(expiration)
    if per_message is None:
        return queue_ttl
    return per_message if queue_ttl is None else min(queue_ttl, per_message)


def is_expired(enqueued_ms: int, ttl_ms: int | None, now_ms: int) -> bool:
    """Whether a message that entered the queue at ``enqueued_ms`` has outlived ``ttl_ms``."""
    if ttl_ms is None:
        return False
    return now_ms - enqueued_ms > max(ttl_ms, ZERO_TTL_GRACE_MS if ttl_ms == 0 else 0)
