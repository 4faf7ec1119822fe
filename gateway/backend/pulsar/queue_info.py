"""A queue's message counts and rates, now, from Pulsar's statistics: what the management API
answers for ``GET /api/queues/{vhost}/{name}`` (KEDA's scaler reads ``messages``,
``messages_ready`` and ``message_stats.publish_details.rate`` from it).

The same reading of Pulsar as the leader's gauges (leader/queue_stats.py), for a few queues at a
time and on demand: ``messages`` is the backlog of the queue's subscription on every topic it
reads (every message not acknowledged: entries, not messages, when batching is on), and
``messages_unacknowledged`` what Pulsar has dispatched to the fleet's consumers and not seen
acknowledged (including what a replica read ahead for its clients and has not handed out);
``messages_ready`` the rest. Rates are Pulsar's (its one-minute rates, per topic and
subscription). One counter is meant for one request: topic statistics read for one queue
serve every other queue of the request that reads the same topic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from gateway.backend.pulsar.queue_types.stream.queues import stream_of
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.model.naming import subscription_for
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.admin_stats import TopicStats
from gateway.pulsar.errors import NotFound

__all__ = ["QueueCounter", "QueueCounts"]

CONCURRENCY = 8


@dataclass(frozen=True, slots=True)
class QueueCounts:
    messages: int = 0
    ready: int = 0
    unacknowledged: int = 0
    published: int = 0
    publish_rate: float = 0.0
    deliver_rate: float = 0.0
    ack_rate: float = 0.0


class QueueCounter:
    def __init__(self, admin: PulsarAdmin) -> None:
        self._admin = admin
        self._stats: dict[str, TopicStats | None] = {}
        self._limiter = trio.CapacityLimiter(CONCURRENCY)

    async def _topic(self, topic: str) -> TopicStats | None:
        if topic not in self._stats:
            async with self._limiter:
                if topic not in self._stats:
                    try:
                        self._stats[topic] = await self._admin.topic_stats(topic)
                    except NotFound:
                        self._stats[topic] = None  # nothing was ever published there
        return self._stats[topic]

    async def counts(self, vhost: PulsarVirtualHost, queue: str) -> QueueCounts:
        view = vhost.catalog.view
        subscription = subscription_for(queue)
        messages = unacked = published = 0
        publish_rate = deliver_rate = ack_rate = 0.0
        for topic in sorted(vhost.live_topics(view, queue)):
            stats = await self._topic(topic)
            if stats is None:
                continue
            raw: Mapping[str, Any] = stats.raw
            published += stats.msg_in_counter
            publish_rate += _number(raw.get("msgRateIn"))
            found = stats.subscriptions.get(subscription)
            if found is None:
                continue
            messages += found.msg_backlog
            unacked += min(found.unacked_messages, found.msg_backlog)
            details = (raw.get("subscriptions") or {}).get(subscription) or {}
            deliver_rate += _number(details.get("msgRateOut"))
            ack_rate += _number(details.get("messageAckRate"))
        if stream_of(view, queue) is not None:
            stored = await vhost.streams.stored(queue)
            messages += stored
        return QueueCounts(
            messages=messages,
            ready=max(0, messages - unacked),
            unacknowledged=unacked,
            published=published,
            publish_rate=publish_rate,
            deliver_rate=deliver_rate,
            ack_rate=ack_rate,
        )


def _number(value: Any) -> float:
    try:
        return float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0
