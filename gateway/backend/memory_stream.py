"""Stream queues of the in-memory backend: a list of messages with dense offsets 0, 1, 2, …

The same rules as on Pulsar (model/streams.py): consumers read from an offset spec and
remove nothing; every settlement only gives credit back; retention (``x-max-age``,
``x-max-length-bytes``) drops the oldest messages, always keeping the newest.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import trio

from gateway.backend.interface import Message, ReceivesByWaiting, SubscriptionEnded
from gateway.model.streams import (
    FIRST,
    LAST,
    At,
    Edge,
    OffsetSpec,
    Since,
    StreamFilter,
    StreamRetention,
    with_offset_header,
)

__all__ = ["MemoryStream", "MemoryStreamDelivery", "MemoryStreamSubscription"]


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class StreamEntry:
    offset: int
    message: Message
    stored_ms: int


@dataclass(eq=False)
class MemoryStream:
    name: str
    retention: StreamRetention
    entries: deque[StreamEntry] = field(default_factory=deque)
    next_offset: int = 0
    size: int = 0  # bytes of the bodies kept
    deleted: bool = False
    changed: trio.Event = field(default_factory=trio.Event)

    def append(self, message: Message) -> None:
        self.entries.append(StreamEntry(self.next_offset, message, _now_ms()))
        self.next_offset += 1
        self.size += len(message.body)
        self.trim()
        self.changed.set()
        self.changed = trio.Event()

    def trim(self) -> None:
        """Apply retention: the oldest messages go while over a limit (the newest stays)."""
        limit = self.retention
        oldest_kept = None if limit.max_age_ms is None else _now_ms() - limit.max_age_ms
        while len(self.entries) > 1 and (
            (limit.max_bytes is not None and self.size > limit.max_bytes)
            or (oldest_kept is not None and self.entries[0].stored_ms < oldest_kept)
        ):
            self.size -= len(self.entries.popleft().message.body)

    def count(self) -> int:
        self.trim()
        return len(self.entries)

    def start(self, spec: OffsetSpec) -> int:
        """The offset a consumer with ``spec`` reads first."""
        self.trim()
        first = self.entries[0].offset if self.entries else self.next_offset
        if spec == FIRST:
            return first
        if spec == LAST:
            return self.entries[-1].offset if self.entries else self.next_offset
        if isinstance(spec, At):
            return min(max(spec.offset, first), self.next_offset)
        if isinstance(spec, Since):
            for entry in self.entries:
                if entry.stored_ms >= spec.timestamp_ms:
                    return entry.offset
            return self.next_offset
        assert isinstance(spec, Edge)  # next
        return self.next_offset

    def at_or_after(self, offset: int) -> StreamEntry | None:
        if not self.entries or offset >= self.next_offset:
            return None
        first = self.entries[0].offset
        return self.entries[max(0, offset - first)]

    def delete(self) -> None:
        self.deleted = True
        self.entries.clear()
        self.changed.set()


@dataclass(eq=False)
class MemoryStreamDelivery:
    message: Message
    redelivered: bool = False

    async def ack(self) -> None:
        """Nothing to remove: acknowledging only gives the consumer credit."""

    def ack_now(self) -> None:
        """As ``ack``."""

    async def reject(self, requeue: bool) -> None:
        """Neither requeued nor dropped (RabbitMQ: every settlement is credit)."""


@dataclass(eq=False)
class MemoryStreamSubscription(ReceivesByWaiting):
    stream: MemoryStream
    position: int
    filter: StreamFilter | None
    on_closed: Callable[[MemoryStreamSubscription], Awaitable[None]]
    closed: bool = False

    async def receive(
        self, before_wait: Callable[[], Awaitable[None]] | None = None
    ) -> MemoryStreamDelivery:
        while True:
            if self.stream.deleted or self.closed:
                raise SubscriptionEnded(self.stream.name)
            entry = self.stream.at_or_after(self.position)
            if entry is not None:
                self.position = entry.offset + 1
                message = entry.message
                if self.filter is not None and not self.filter.admits(message.properties.headers):
                    continue
                header = with_offset_header(message.header, entry.offset)
                return MemoryStreamDelivery(replace(message, header=header))
            if before_wait is not None:
                flush, before_wait = before_wait, None
                await flush()
                continue
            await self.stream.changed.wait()

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.on_closed(self)
