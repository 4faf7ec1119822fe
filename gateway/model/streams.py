"""Stream queues (``x-queue-type: stream``) over AMQP 0-9-1: RabbitMQ's rules, without I/O.

A stream is an append-only log; consumers read it from an offset and remove nothing
(RabbitMQ's ``docs/streams.md``). What RabbitMQ 4.x answers (``rabbit_stream_queue``):

- Basic.Consume needs a consumer prefetch (Basic.Qos ``global=false``): without one, 406
  ``consumer prefetch count is not set for stream queue 'q' in vhost '/'``; with
  ``no_ack``, 540 ``automatic acknowledgement not supported by stream queue …``; on a channel
  with a ``global=true`` prefetch, 540 ``queue 'q' in vhost '/' does not support global qos``
  (checked in that order);
- ``x-stream-offset`` (``parse_offset_arg``): ``first``, ``last``, ``next`` (the default), an
  integer offset, an AMQP timestamp (seconds), or an interval in ``x-max-age``'s syntax
  (``7D``, ``12h``, counted back from now); a bad interval is 406 ``failed consuming from
  stream queue 'q' in vhost '/': invalid_max_age``;
- ``x-stream-filter`` (a string or an array of strings) and ``x-stream-match-unfiltered``
  (bool) select messages by their ``x-stream-filter-value`` header (``filter_spec``);
- each delivery carries the ``x-stream-offset`` header (a long), is never ``redelivered``,
  and every settlement (ack, nack, reject, with or without requeue) only gives the consumer
  its credit back;
- Basic.Get is 540 ``basic.get not supported by stream queues queue 'q' in vhost '/'``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Final

from gateway.amqp.errors import ChannelError, ReplyCode, amqp_error
from gateway.amqp.fieldtable import Field
from gateway.amqp.properties import decode_properties, encode_properties
from gateway.model.values import type_name

__all__ = [
    "FIRST",
    "LAST",
    "NEXT",
    "OFFSET_HEADER",
    "At",
    "Edge",
    "OffsetSpec",
    "Since",
    "StreamFilter",
    "StreamRetention",
    "check_stream_consume",
    "max_age_ms",
    "parse_offset",
    "refuse_get",
    "refuse_purge",
    "stream_filter",
    "stream_retention",
    "with_offset_header",
]

OFFSET_HEADER: Final = "x-stream-offset"
FILTER_VALUE_HEADER: Final = "x-stream-filter-value"
# rabbit_amqqueue:unit_value_in_ms: Y is 365 days, M 30 days.
_UNIT_MS: Final[Mapping[str, int]] = {
    "Y": 365 * 86_400_000,
    "M": 30 * 86_400_000,
    "D": 86_400_000,
    "h": 3_600_000,
    "m": 60_000,
    "s": 1_000,
}
_MAX_AGE: Final = re.compile(r"([0-9]+)(Y|M|D|h|m|s)")
_INTEGER_KINDS: Final = frozenset("bsIlBuiL")


def max_age_ms(text: str) -> int | None:
    """``x-max-age`` (and an interval ``x-stream-offset``) in milliseconds: a positive
    number and one unit of Y, M, D, h, m, s (``rabbit_amqqueue:check_max_age``); None when
    RabbitMQ answers ``invalid_max_age``."""
    match = _MAX_AGE.fullmatch(text)
    if match is None or int(match.group(1)) <= 0:
        return None
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


# ------------------------------------------------------------------ offsets


@dataclass(frozen=True, slots=True)
class Edge:
    """``first``, ``last`` or ``next``."""

    name: str


FIRST: Final = Edge("first")
LAST: Final = Edge("last")
NEXT: Final = Edge("next")


@dataclass(frozen=True, slots=True)
class At:
    """A numeric offset: the first message whose offset is at least ``offset`` (RabbitMQ
    clamps an offset outside the log to its start or end)."""

    offset: int


@dataclass(frozen=True, slots=True)
class Since:
    """The first message stored at ``timestamp_ms`` (ms since the epoch) or later."""

    timestamp_ms: int


OffsetSpec = Edge | At | Since


def _text(value: object) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def parse_offset(where: str, field: Field | None, now_ms: int) -> OffsetSpec:
    """RabbitMQ's ``parse_offset_arg`` of the consumer's ``x-stream-offset``."""
    if field is None:
        return NEXT
    text = _text(field.value) if field.kind in ("S", "x") else None
    if text in ("first", "last", "next"):
        return Edge(text)
    if field.kind == "T":
        return Since(int(field.value) * 1000)  # AMQP timestamps are seconds
    if field.kind == "S":
        interval = None if text is None else max_age_ms(text)
        if interval is None:
            raise _failed(where, "invalid_max_age")
        return Since(now_ms - interval)
    if field.kind in _INTEGER_KINDS:
        return At(max(0, int(field.value)))
    # RabbitMQ hands any other value to its log reader, which cannot use it.
    raise _failed(where, "{invalid_offset_arg," + type_name(field.kind) + "}")


def _failed(where: str, reason: str) -> ChannelError:
    return ChannelError(
        ReplyCode.PRECONDITION_FAILED, f"failed consuming from stream {where}: {reason}"
    )


# ------------------------------------------------------------------ consuming


def check_stream_consume(
    where: str, *, no_ack: bool, consumer_prefetch: int, channel_prefetch: int
) -> None:
    """``rabbit_stream_queue:consume``'s refusals, in its order. ``where`` is ``queue 'q' in
    vhost '/'``; the prefetches are Basic.Qos ``global=false`` and ``global=true``."""
    if consumer_prefetch == 0:
        raise ChannelError(
            ReplyCode.PRECONDITION_FAILED, f"consumer prefetch count is not set for stream {where}"
        )
    if no_ack:
        raise amqp_error(
            ReplyCode.NOT_IMPLEMENTED, f"automatic acknowledgement not supported by stream {where}"
        )
    if channel_prefetch:
        raise amqp_error(ReplyCode.NOT_IMPLEMENTED, f"{where} does not support global qos")


def refuse_purge(where: str) -> Exception:
    """Queue.Purge of a stream (``rabbit_channel``: the type's purge is ``not_supported``)."""
    return amqp_error(
        ReplyCode.NOT_IMPLEMENTED, f"queue.purge not supported by stream queues {where}"
    )


def refuse_get(where: str) -> Exception:
    """Basic.Get on a stream (``rabbit_stream_queue:dequeue``)."""
    return amqp_error(
        ReplyCode.NOT_IMPLEMENTED, f"basic.get not supported by stream queues {where}"
    )


@dataclass(frozen=True, slots=True)
class StreamFilter:
    """A consumer's ``x-stream-filter``: the filter values it wants, and whether messages
    without a filter value come too (``x-stream-match-unfiltered``).

    RabbitMQ filters with a Bloom filter per chunk, so its consumers may get other messages
    too and must filter again themselves; this filter is exact (a stricter subset)."""

    values: frozenset[str]
    match_unfiltered: bool = False

    def admits(self, headers: Mapping[str, Field] | None) -> bool:
        field = None if headers is None else headers.get(FILTER_VALUE_HEADER)
        if field is None:
            return self.match_unfiltered
        value = _text(field.value) if field.kind in ("S", "x") else None
        return value is not None and value in self.values


def stream_filter(arguments: Mapping[str, Field]) -> StreamFilter | None:
    """The consumer's filter (``rabbit_stream_queue:filter_spec``): None without a usable
    ``x-stream-filter``; array elements that are not strings are skipped, and a
    ``x-stream-match-unfiltered`` that is not a bool counts as false, as there."""
    field = arguments.get("x-stream-filter")
    if field is None:
        return None
    items: Collection[Field]
    if field.kind == "S":
        items = [field]
    elif field.kind == "A":
        items = [item for item in field.value if item.kind == "S"]
    else:
        return None
    values = frozenset(text for item in items if (text := _text(item.value)) is not None)
    unfiltered = arguments.get("x-stream-match-unfiltered")
    match = unfiltered is not None and unfiltered.kind == "t" and bool(unfiltered.value)
    return StreamFilter(values, match)


def with_offset_header(header: bytes, offset: int) -> bytes:
    """The raw content properties ``header`` with the ``x-stream-offset`` header (a long)
    set, as RabbitMQ adds it to every message it delivers from a stream."""
    properties = decode_properties(header)
    headers = dict(properties.headers or {})
    headers[OFFSET_HEADER] = Field("l", offset)
    return encode_properties(replace(properties, headers=headers))


# ------------------------------------------------------------------ retention


@dataclass(frozen=True, slots=True)
class StreamRetention:
    """What a stream keeps: messages younger than ``max_age_ms`` and, newest first, up to
    ``max_bytes`` (None: no limit). RabbitMQ drops whole segments once either is exceeded."""

    max_age_ms: int | None = None
    max_bytes: int | None = None


def stream_retention(arguments: Mapping[str, Field]) -> StreamRetention:
    """``x-max-age`` and ``x-max-length-bytes`` of validated stream arguments."""
    age = arguments.get("x-max-age")
    size = arguments.get("x-max-length-bytes")
    age_ms = max_age_ms(_text(age.value) or "") if age is not None else None
    return StreamRetention(age_ms, None if size is None else int(size.value))
