"""Typed views of the admin API's statistics answers (pure parsing, no I/O).

Only the fields the gateway uses are typed; ``raw`` keeps the whole JSON object for anything
else (metrics, debugging).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key, 0)
    return int(value) if value is not None else 0


def _float(data: Mapping[str, Any], key: str) -> float:
    value = data.get(key, 0.0)
    return float(value) if value is not None else 0.0


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    name: str
    unacked_messages: int
    available_permits: int
    msg_rate_out: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ConsumerStats:
        return cls(
            name=str(data.get("consumerName", "")),
            unacked_messages=_int(data, "unackedMessages"),
            available_permits=_int(data, "availablePermits"),
            msg_rate_out=_float(data, "msgRateOut"),
        )


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    name: str
    # Entries, not messages: a batch of N messages counts once (measured on Pulsar 4.0.8, with
    # and without getPreciseBacklog). Use PulsarAdmin.analyze_backlog for a message count.
    msg_backlog: int
    unacked_messages: int
    # "Shared", "Exclusive", "Failover", "Key_Shared", or "None" while no consumer is attached.
    type: str
    consumers: tuple[ConsumerStats, ...]
    msg_out_counter: int
    is_durable: bool

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> SubscriptionStats:
        return cls(
            name=name,
            msg_backlog=_int(data, "msgBacklog"),
            unacked_messages=_int(data, "unackedMessages"),
            type=str(data.get("type", "None")),
            consumers=tuple(ConsumerStats.from_json(c) for c in data.get("consumers") or ()),
            msg_out_counter=_int(data, "msgOutCounter"),
            is_durable=bool(data.get("isDurable", data.get("durable", True))),
        )


@dataclass(frozen=True, slots=True)
class TopicStats:
    msg_in_counter: int
    bytes_in_counter: int
    storage_size: int
    publisher_count: int
    subscriptions: Mapping[str, SubscriptionStats]
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TopicStats:
        subs = data.get("subscriptions") or {}
        return cls(
            msg_in_counter=_int(data, "msgInCounter"),
            bytes_in_counter=_int(data, "bytesInCounter"),
            storage_size=_int(data, "storageSize"),
            publisher_count=len(data.get("publishers") or ()),
            subscriptions={n: SubscriptionStats.from_json(n, s) for n, s in subs.items()},
            raw=data,
        )


@dataclass(frozen=True, slots=True)
class BacklogAnalysis:
    """The answer of ``analyzeBacklog``: the broker reads the backlog and counts messages."""

    entries: int
    messages: int
    # True when the broker stopped scanning (subscriptionBacklogScanMaxEntries, 10,000 entries
    # by default): ``messages`` is then a lower bound.
    aborted: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BacklogAnalysis:
        return cls(
            entries=_int(data, "entries"),
            messages=_int(data, "messages"),
            aborted=bool(data.get("aborted", False)),
        )

    def messages_in(self, backlog_entries: int) -> int:
        """The messages in a backlog of ``backlog_entries`` entries (the subscription's
        ``msgBacklog``). A finished scan counted them all; an aborted one counted only its
        first ``entries``, so the rest is taken at the messages-per-entry it saw: Queue.DeclareOk
        would otherwise report 10,000 for a queue of 50,000 (RabbitMQ's count is exact)."""
        if not self.aborted or self.entries == 0:
            return self.messages
        unscanned = max(0, backlog_entries - self.entries)
        return self.messages + round(unscanned * self.messages / self.entries)


# An entry's position in a topic: (ledger id, entry id).
Position = tuple[int, int]

_RANGE = re.compile(r"\((-?\d+):(-?\d+)\.\.(-?\d+):(-?\d+)\]")


@dataclass(frozen=True, slots=True)
class CursorState:
    """Which entries a subscription's cursor has acknowledged (the topic's internal stats):
    everything up to ``mark_delete``, and the ranges acknowledged out of order after it."""

    mark_delete: Position
    # Half-open ranges (after, up to]: Pulsar writes them "(3:10..3:12]".
    deleted: tuple[tuple[Position, Position], ...]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CursorState:
        ledger, _, entry = str(data.get("markDeletePosition") or "-1:-1").partition(":")
        ranges = _RANGE.findall(str(data.get("individuallyDeletedMessages") or ""))
        return cls(
            (int(ledger), int(entry)),
            tuple(((int(a), int(b)), (int(c), int(d))) for a, b, c, d in ranges),
        )

    def acknowledged(self, position: Position) -> bool:
        """Whether the entry at ``position`` is acknowledged on this cursor."""
        if position <= self.mark_delete:
            return True
        return any(after < position <= upto for after, upto in self.deleted)
