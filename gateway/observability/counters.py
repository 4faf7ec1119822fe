"""What one gateway process counts, as plain Python ints (no Prometheus objects on hot paths).

The publish and consume paths add to attributes of objects they already hold (a session holds
its vhost's :class:`VhostCounters`), which costs a few attribute increments per message. The
Prometheus exposition (``metrics.py``) and the usage events (``usage.py``) read these at scrape
or window time. Everything here is single-threaded (one trio run per process), so plain ints
need no locks.

Counters only ever grow (Prometheus counters, usage-event deltas); gauges are the fields named
so in the comments.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "COUNTERS",
    "LATENCY_BUCKETS",
    "MESSAGE_SIZE_BUCKETS",
    "WATCH_LAG_BUCKETS",
    "Histogram",
    "ProcessCounters",
    "QueueGauge",
    "VhostCounters",
]

#: rabbitmq_message_size_bytes buckets, as rabbitmq-server's rabbit_msg_size_metrics has them
#: (the Overview dashboard's "Message Size Distribution" queries these exact ``le`` values).
MESSAGE_SIZE_BUCKETS: Final = (
    100.0,
    1_000.0,
    10_000.0,
    100_000.0,
    1_000_000.0,
    10_000_000.0,
    50_000_000.0,
    100_000_000.0,
)

#: Seconds, the 1-2.5-5 steps from a millisecond to ten seconds that both latency scales share.
_MILLISECOND_TO_TEN_SECONDS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)

#: Seconds, for the gateway's own latency histograms (publish→confirm, Pulsar send).
LATENCY_BUCKETS: Final = (0.0005, *_MILLISECOND_TO_TEN_SECONDS)


#: Seconds, for starlight_metadata_watch_lag_seconds: a change usually shows in milliseconds;
#: the long tail is a replica that was disconnected from ZooKeeper and caught up on reconnect.
WATCH_LAG_BUCKETS: Final = (*_MILLISECOND_TO_TEN_SECONDS, 30.0, 60.0)


class Histogram:
    """A Prometheus histogram kept as one int per bucket (not cumulative) and a sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        # One more than bounds: the +Inf bucket.
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "<=").
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, +Inf last, as the exposition wants them."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            total += count
            out.append((_le(bound), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)


def _le(bound: float) -> str:
    # prometheus-client's float formatting (100.0, 1e+06), which the dashboards' le="..." use.
    from prometheus_client.utils import floatToGoString

    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]


class VhostCounters:
    """Message counts of one vhost in this process; the per-message paths add to these.

    The rabbitmq_global_* counters are the sums over every vhost; the usage events are their
    per-window differences.
    """

    __slots__ = (
        "acknowledged",
        "acknowledged_bytes",
        "channels",
        "confirmed",
        "connections",
        "consumers",
        "delivered_bytes",
        "delivered_consume_auto_ack",
        "delivered_consume_manual_ack",
        "delivered_get_auto_ack",
        "delivered_get_manual_ack",
        "get_empty",
        "nacked_publishes",
        "name",
        "peak_connections",
        "publishers",
        "received",
        "received_bytes",
        "received_confirm",
        "redelivered",
        "returned_bytes",
        "routed",
        "routed_bytes",
        "unroutable_dropped",
        "unroutable_returned",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.received = 0  # Basic.Publish received
        self.received_bytes = 0
        self.received_confirm = 0  # ... on channels in confirm mode
        self.routed = 0  # routed to at least one queue
        self.routed_bytes = 0
        self.unroutable_dropped = 0  # unroutable, not mandatory: dropped
        self.unroutable_returned = 0  # unroutable and mandatory: Basic.Return
        self.returned_bytes = 0
        self.confirmed = 0  # Basic.Ack sent to publishers (messages, not frames)
        self.nacked_publishes = 0  # Basic.Nack sent to publishers
        self.delivered_consume_auto_ack = 0
        self.delivered_consume_manual_ack = 0
        self.delivered_get_auto_ack = 0
        self.delivered_get_manual_ack = 0
        self.delivered_bytes = 0
        self.redelivered = 0  # deliveries with the redelivered flag set
        self.get_empty = 0
        self.acknowledged = 0  # settled by the client's Basic.Ack (RabbitMQ's meaning)
        # Bytes of every message settled by an ack, manual or automatic (usage events).
        self.acknowledged_bytes = 0
        self.connections = 0  # gauge: open connections on this vhost
        self.peak_connections = 0  # gauge: most open at once since the last usage window
        self.channels = 0  # gauge
        self.consumers = 0  # gauge
        self.publishers = 0  # gauge: channels that have published (RabbitMQ's "publishers")

    @property
    def delivered(self) -> int:
        return (
            self.delivered_consume_auto_ack
            + self.delivered_consume_manual_ack
            + self.delivered_get_auto_ack
            + self.delivered_get_manual_ack
        )

    def connection_opened(self) -> None:
        self.connections += 1
        if self.connections > self.peak_connections:
            self.peak_connections = self.connections

    def connection_closed(self) -> None:
        self.connections -= 1


@dataclass(frozen=True, slots=True)
class QueueGauge:
    """One queue's depth, from Pulsar's subscription statistics (refreshed in the background)."""

    ready: int  # backlog not dispatched to any replica's consumer
    messages: int  # the whole backlog: every message not acknowledged yet
    consumers: int


def _as_given(name: str) -> str:
    return name


@dataclass
class ProcessCounters:
    """Everything this process counts. One instance per process: :data:`COUNTERS`."""

    vhosts: dict[str, VhostCounters] = field(default_factory=dict)
    connections_opened: int = 0
    connections_closed: int = 0
    channels_opened: int = 0
    channels_closed: int = 0
    queues_declared: int = 0
    queues_created: int = 0
    queues_deleted: int = 0
    incoming_bytes: int = 0
    outgoing_bytes: int = 0
    message_sizes: Histogram = field(default_factory=lambda: Histogram(MESSAGE_SIZE_BUCKETS))
    publish_confirm_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    pulsar_send_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    # A metadata write by another replica → this replica's view shows it (ZooKeeper's mtime).
    metadata_watch_lag: Histogram = field(default_factory=lambda: Histogram(WATCH_LAG_BUCKETS))
    # Gauge: connections whose reader waits for Pulsar (Connection.Blocked territory).
    blocked_publishes: int = 0
    blocked_total: int = 0  # times a publish waited long enough to block its connection
    # Connection.Close / Channel.Close sent by the gateway, by reply code.
    protocol_errors: dict[int, int] = field(default_factory=dict)
    # Failed logins by SASL mechanism.
    auth_failures: dict[str, int] = field(default_factory=dict)
    auth_attempts: int = 0
    # Queue gauges, by namespace then queue, of the namespaces this replica leads.
    queues: dict[str, dict[str, QueueGauge]] = field(default_factory=dict)
    # Leader-elected work, by job ("reaper", "cleaner", "reconciler", "expiry", "length",
    # "queue-expiry").
    leader_rounds: dict[str, int] = field(default_factory=dict)
    leader_round_failures: dict[str, int] = field(default_factory=dict)
    leader_removals: dict[str, int] = field(default_factory=dict)
    # Namespaces this replica leads now.
    leading: set[str] = field(default_factory=set)
    usage_events_published: int = 0
    usage_event_failures: int = 0
    # The ``vhost`` label. A vhost has aliases (``orders``, ``/orders`` and ``public/orders``
    # are one namespace) and a replica may lead a namespace none of its clients opened, so
    # every label is the one name of the namespace (``VhostMapper.vhost_name``), the same on
    # every replica. Set by the replica from its vhost mapping (server/monitoring.py); as
    # given until then (unit tests).
    vhost_label: Callable[[str], str] = _as_given  # a vhost as a client named it -> label
    namespace_label: Callable[[str], str] = _as_given  # "tenant/ns" -> label

    def vhost(self, name: str) -> VhostCounters:
        """The counters of vhost ``name`` (under its label: aliases share them), created on
        first use."""
        name = self.vhost_label(name)
        counters = self.vhosts.get(name)
        if counters is None:
            counters = self.vhosts[name] = VhostCounters(name)
        return counters

    def protocol_error(self, reply_code: int) -> None:
        self.protocol_errors[reply_code] = self.protocol_errors.get(reply_code, 0) + 1

    def auth_failed(self, mechanism: str) -> None:
        self.auth_failures[mechanism] = self.auth_failures.get(mechanism, 0) + 1

    def leader_round(self, job: str, *, failed: bool = False) -> None:
        self.leader_rounds[job] = self.leader_rounds.get(job, 0) + 1
        if failed:
            self.leader_round_failures[job] = self.leader_round_failures.get(job, 0) + 1

    def leader_removed(self, job: str, count: int = 1) -> None:
        self.leader_removals[job] = self.leader_removals.get(job, 0) + count


#: This process's counters.
COUNTERS: Final = ProcessCounters()
