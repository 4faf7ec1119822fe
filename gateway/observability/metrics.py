"""Every Prometheus metric the gateway exposes, defined in this one module.

RabbitMQ's own names come first (``rabbitmq_prometheus``'s aggregated endpoint: same names,
types, labels and meanings), so that a Prometheus and Grafana set up for RabbitMQ work
unchanged; the gateway's own metrics are named ``starlight_*``. docs/observability.md lists
each with its meaning, labels and source.

Nothing here runs per message: :class:`GatewayCollector` reads the plain-int counters of
``counters.py`` when Prometheus scrapes (a custom prometheus-client Collector), so the hot
paths never call ``Counter.inc()``.
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway import __version__
from gateway.observability.counters import COUNTERS, Histogram, ProcessCounters, VhostCounters

__all__ = [
    "PROTOCOL",
    "QUEUE_TYPE",
    "GatewayCollector",
    "Identity",
    "default_node_name",
    "exposition",
    "identity_families",
]

#: The ``protocol`` label of rabbitmq_global_* counters: RabbitMQ counts per protocol.
PROTOCOL: Final = "amqp091"
#: The ``queue_type`` label: a queue declared without x-queue-type is a classic queue in
#: RabbitMQ, and that is what clients of this gateway declare.
QUEUE_TYPE: Final = "rabbit_classic_queue"
#: rabbitmq_disk_space_available_limit_bytes: RabbitMQ's default disk_free_limit (50 MB).
#: The gateway stores nothing on disk; the figure keeps the Overview's panel meaningful.
DISK_FREE_LIMIT: Final = 50_000_000
#: RabbitMQ blocks publishers at 40% of RAM (vm_memory_high_watermark 0.4 before 3.13).
MEMORY_WATERMARK: Final = 0.4

_STARTED: Final = time.time()


def default_node_name() -> str:
    """``amqpNodeName`` when unset: ``rabbit@<host name>``, RabbitMQ's own node naming (in
    Kubernetes the host name is the pod's name, so each replica differs)."""
    return f"rabbit@{socket.gethostname()}"


@dataclass(frozen=True)
class Identity:
    """Who this replica is, for rabbitmq_identity_info (the dashboards' join key)."""

    node: str
    cluster: str
    # rabbitmq_endpoint: RabbitMQ names its /metrics endpoint "aggregated".
    endpoint: str = "aggregated"


# (attribute of VhostCounters, metric name without rabbitmq_global_ and _total, help,
#  whether RabbitMQ labels it with queue_type besides protocol)
_GLOBAL_COUNTERS: Final = (
    ("received", "messages_received", "Total number of messages received from publishers", False),
    (
        "received_confirm",
        "messages_received_confirm",
        "Total number of messages received from publishers expecting confirmations",
        False,
    ),
    ("routed", "messages_routed", "Total number of messages routed to queues or streams", False),
    (
        "unroutable_dropped",
        "messages_unroutable_dropped",
        "Total number of messages published as non-mandatory into an exchange and dropped "
        "as unroutable",
        False,
    ),
    (
        "unroutable_returned",
        "messages_unroutable_returned",
        "Total number of messages published as mandatory into an exchange and returned to "
        "the publisher as unroutable",
        False,
    ),
    ("confirmed", "messages_confirmed", "Total number of messages confirmed to publishers", False),
    (
        "delivered_consume_manual_ack",
        "messages_delivered_consume_manual_ack",
        "Total number of messages delivered to consumers using basic.consume with manual "
        "acknowledgment",
        True,
    ),
    (
        "delivered_consume_auto_ack",
        "messages_delivered_consume_auto_ack",
        "Total number of messages delivered to consumers using basic.consume with automatic "
        "acknowledgment",
        True,
    ),
    (
        "delivered_get_manual_ack",
        "messages_delivered_get_manual_ack",
        "Total number of messages delivered to consumers using basic.get with manual "
        "acknowledgment",
        True,
    ),
    (
        "delivered_get_auto_ack",
        "messages_delivered_get_auto_ack",
        "Total number of messages delivered to consumers using basic.get with automatic "
        "acknowledgment",
        True,
    ),
    (
        "get_empty",
        "messages_get_empty",
        "Total number of times basic.get operations fetched no message",
        True,
    ),
    (
        "redelivered",
        "messages_redelivered",
        "Total number of messages redelivered to consumers",
        True,
    ),
    (
        "acknowledged",
        "messages_acknowledged",
        "Total number of messages acknowledged by consumers",
        True,
    ),
)

# Per-vhost counters of the gateway's own (RabbitMQ's aggregated endpoint has no vhost label).
_VHOST_COUNTERS: Final = (
    ("received", "messages_published", "Messages published (Basic.Publish) on the vhost"),
    ("received_bytes", "published_bytes", "Body bytes of the messages published"),
    ("routed", "messages_routed", "Published messages routed to at least one queue"),
    ("unroutable_returned", "messages_returned", "Messages returned unroutable (Basic.Return)"),
    ("unroutable_dropped", "messages_dropped", "Unroutable non-mandatory messages dropped"),
    ("confirmed", "messages_confirmed", "Messages confirmed to publishers (Basic.Ack)"),
    ("nacked_publishes", "messages_nacked", "Publishes refused to publishers (Basic.Nack)"),
    ("delivered", "messages_delivered", "Messages delivered (Basic.Deliver and Basic.Get-Ok)"),
    ("delivered_bytes", "delivered_bytes", "Body bytes of the messages delivered"),
    ("acknowledged", "messages_acknowledged", "Deliveries acknowledged by clients (Basic.Ack)"),
    ("redelivered", "messages_redelivered", "Deliveries with the redelivered flag set"),
)

_VHOST_GAUGES: Final = (
    ("connections", "connections", "Open AMQP connections on the vhost"),
    ("channels", "channels", "Open channels on the vhost"),
    ("consumers", "consumers", "Consumers (Basic.Consume) on the vhost"),
    ("publishers", "publishers", "Channels on the vhost that have published"),
)


def _sum(vhosts: Iterable[VhostCounters], attribute: str) -> int:
    return sum(getattr(counters, attribute) for counters in vhosts)


def _histogram(
    name: str,
    documentation: str,
    histogram: Histogram,
    labels: list[str] | None = None,
    values: list[str] | None = None,
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=labels)
    family.add_metric(values or [], histogram.cumulative(), histogram.sum)
    return family


class GatewayCollector(Collector):
    """Reads ``counters`` (and the process) at scrape time and yields every metric family.

    ``health``: the readiness checks of this replica, exported as starlight_ready{check}.
    ``zookeeper_connected``: None when the replica has no ZooKeeper session to report.
    """

    def __init__(
        self,
        identity: Identity,
        counters: ProcessCounters = COUNTERS,
        *,
        checks: Callable[[], dict[str, bool]] | None = None,
        zookeeper_connected: Callable[[], bool] | None = None,
        pulsar_clients: Callable[[], tuple[int, int]] | None = None,
        held: Callable[[], Mapping[tuple[str, str], int]] | None = None,
    ) -> None:
        self._identity = identity
        self._c = counters
        self._checks = checks
        self._zookeeper_connected = zookeeper_connected
        self._pulsar_clients = pulsar_clients
        self._held = held

    def collect(self) -> Iterator[Metric]:
        yield from self._identity_families()
        yield from self._rabbitmq_core()
        yield from self._rabbitmq_global()
        yield from self._rabbitmq_queues()
        yield from self._rabbitmq_process()
        yield from self._gateway()

    # ------------------------------------------------------------------ identity

    def _identity_families(self) -> Iterator[Metric]:
        yield from identity_families(self._identity)

    # ------------------------------------------------------------------ rabbitmq_core

    def _rabbitmq_core(self) -> Iterator[Metric]:
        c = self._c
        vhosts = list(c.vhosts.values())
        for name, value, documentation in (
            ("connections_opened", c.connections_opened, "Total number of connections opened"),
            (
                "connections_closed",
                c.connections_closed,
                "Total number of connections closed or terminated",
            ),
            ("channels_opened", c.channels_opened, "Total number of channels opened"),
            ("channels_closed", c.channels_closed, "Total number of channels closed"),
            ("queues_declared", c.queues_declared, "Total number of queues declared"),
            ("queues_created", c.queues_created, "Total number of queues created"),
            ("queues_deleted", c.queues_deleted, "Total number of queues deleted"),
            (
                "connection_incoming_bytes",
                c.incoming_bytes,
                "Total number of bytes received on a connection",
            ),
            (
                "connection_outgoing_bytes",
                c.outgoing_bytes,
                "Total number of bytes sent on a connection",
            ),
            (
                "auth_attempts",
                c.auth_attempts,
                "Total number of authentication attempts",
            ),
            (
                "auth_attempts_failed",
                sum(c.auth_failures.values()),
                "Total number of failed authentication attempts",
            ),
        ):
            yield CounterMetricFamily(f"rabbitmq_{name}", documentation, value=value)
        yield CounterMetricFamily(
            "rabbitmq_auth_attempts_succeeded",
            "Total number of successful authentication attempts",
            value=max(0, c.auth_attempts - sum(c.auth_failures.values())),
        )
        yield GaugeMetricFamily(
            "rabbitmq_connections",
            "Connections currently open",
            value=c.connections_opened - c.connections_closed,
        )
        yield GaugeMetricFamily(
            "rabbitmq_channels", "Channels currently open", value=_sum(vhosts, "channels")
        )
        yield GaugeMetricFamily(
            "rabbitmq_consumers", "Consumers currently connected", value=_sum(vhosts, "consumers")
        )
        yield GaugeMetricFamily(
            "rabbitmq_queues",
            "Queues available (counted by the replica leading each vhost, so that a fleet's "
            "sum counts each queue once)",
            value=sum(len(queues) for queues in c.queues.values()),
        )
        yield _histogram(
            "rabbitmq_message_size_bytes",
            "Size of messages received from publishers",
            c.message_sizes,
            ["protocol"],
            [PROTOCOL],
        )

    # ------------------------------------------------------------------ rabbitmq_global

    def _rabbitmq_global(self) -> Iterator[Metric]:
        vhosts = list(self._c.vhosts.values())
        for attribute, name, documentation, by_queue_type in _GLOBAL_COUNTERS:
            labels = ["protocol", "queue_type"] if by_queue_type else ["protocol"]
            family = CounterMetricFamily(f"rabbitmq_global_{name}", documentation, labels=labels)
            values = [PROTOCOL, QUEUE_TYPE] if by_queue_type else [PROTOCOL]
            family.add_metric(values, _sum(vhosts, attribute))
            yield family
        delivered = CounterMetricFamily(
            "rabbitmq_global_messages_delivered",
            "Total number of messages delivered to consumers",
            labels=["protocol", "queue_type"],
        )
        delivered.add_metric([PROTOCOL, QUEUE_TYPE], _sum(vhosts, "delivered"))
        yield delivered
        for name, attribute, documentation in (
            ("publishers", "publishers", "Current number of publishers"),
            ("consumers", "consumers", "Current number of consumers"),
        ):
            gauge = GaugeMetricFamily(f"rabbitmq_global_{name}", documentation, labels=["protocol"])
            gauge.add_metric([PROTOCOL], _sum(vhosts, attribute))
            yield gauge

    # ------------------------------------------------------------------ queues

    def _rabbitmq_queues(self) -> Iterator[Metric]:
        families = {
            "ready": GaugeMetricFamily(
                "rabbitmq_queue_messages_ready",
                "Messages ready to be delivered to consumers",
                labels=["vhost", "queue"],
            ),
            "unacked": GaugeMetricFamily(
                "rabbitmq_queue_messages_unacked",
                "Messages delivered to consumers but not yet acknowledged",
                labels=["vhost", "queue"],
            ),
            "messages": GaugeMetricFamily(
                "rabbitmq_queue_messages",
                "Sum of ready and unacknowledged messages - total queue depth",
                labels=["vhost", "queue"],
            ),
            "consumers": GaugeMetricFamily(
                "rabbitmq_queue_consumers", "Consumers on a queue", labels=["vhost", "queue"]
            ),
        }
        # The vhost's name, also on a leader none of whose clients ever opened it (the
        # namespace is all it knows of the vhost then).
        vhost_of = self._c.namespace_label
        # Unacked: what this replica's clients hold (each replica its own; the fleet's sum is
        # the queue's). The rest: from Pulsar, on the vhost's leader only.
        held = dict(self._held()) if self._held is not None else {}
        for namespace, queues in self._c.queues.items():
            vhost = vhost_of(namespace)
            for queue, gauge in queues.items():
                labels = [vhost, queue]
                families["ready"].add_metric(labels, gauge.ready)
                families["messages"].add_metric(labels, gauge.messages)
                families["consumers"].add_metric(labels, gauge.consumers)
                families["unacked"].add_metric(labels, held.pop((namespace, queue), 0))
        for (namespace, queue), count in held.items():
            families["unacked"].add_metric([vhost_of(namespace), queue], count)
        yield from families.values()

    # ------------------------------------------------------------------ process

    def _rabbitmq_process(self) -> Iterator[Metric]:
        memory = _resident_memory()
        yield GaugeMetricFamily(
            "rabbitmq_process_resident_memory_bytes", "Memory used in bytes", value=memory
        )
        yield GaugeMetricFamily(
            "rabbitmq_resident_memory_limit_bytes",
            "Memory high watermark in bytes (40% of the host's memory, as RabbitMQ's default; "
            "the gateway does not block publishers on it)",
            value=int(_total_memory() * MEMORY_WATERMARK),
        )
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        yield GaugeMetricFamily(
            "rabbitmq_process_open_fds", "Open file descriptors", value=_open_fds()
        )
        yield GaugeMetricFamily(
            "rabbitmq_process_max_fds", "Open file descriptors limit", value=soft
        )
        try:
            free = shutil.disk_usage(".").free
        except OSError:
            free = 0
        yield GaugeMetricFamily(
            "rabbitmq_disk_space_available_bytes", "Disk space available in bytes", value=free
        )
        yield GaugeMetricFamily(
            "rabbitmq_disk_space_available_limit_bytes",
            "Free disk space low watermark in bytes",
            value=DISK_FREE_LIMIT,
        )
        # RabbitMQ's name for node uptime; the Overview's node table reads it.
        yield GaugeMetricFamily(
            "rabbitmq_erlang_uptime_seconds",
            "Node uptime (here: the gateway process's)",
            value=time.time() - _STARTED,
        )

    # ------------------------------------------------------------------ the gateway's own

    def _gateway(self) -> Iterator[Metric]:
        c = self._c
        vhosts = list(c.vhosts.values())
        for attribute, name, documentation in _VHOST_COUNTERS:
            family = CounterMetricFamily(f"starlight_vhost_{name}", documentation, labels=["vhost"])
            for counters in vhosts:
                family.add_metric([counters.name], getattr(counters, attribute))
            yield family
        for attribute, name, documentation in _VHOST_GAUGES:
            gauge = GaugeMetricFamily(f"starlight_vhost_{name}", documentation, labels=["vhost"])
            for counters in vhosts:
                gauge.add_metric([counters.name], getattr(counters, attribute))
            yield gauge
        yield _histogram(
            "starlight_publish_confirm_seconds",
            "Seconds from a Basic.Publish on a confirm channel to its Basic.Ack or Basic.Nack",
            c.publish_confirm_seconds,
        )
        yield _histogram(
            "starlight_pulsar_send_seconds",
            "Seconds from handing a message to pulsar-client (send_async) to its send "
            "callback handled by the gateway, one send in 16",
            c.pulsar_send_seconds,
        )
        yield _histogram(
            "starlight_metadata_watch_lag_seconds",
            "Seconds from a metadata write by another replica (the znode's mtime, ZooKeeper's "
            "clock) to this replica's view showing it; not observed for the first load",
            c.metadata_watch_lag,
        )
        yield GaugeMetricFamily(
            "starlight_blocked_connections",
            "Connections whose publish waits for Pulsar longer than 1 s (back-pressure: "
            "Connection.Blocked sent to clients that accept it)",
            value=c.blocked_publishes,
        )
        yield CounterMetricFamily(
            "starlight_connection_blocked",
            "Times a connection was blocked by back-pressure from Pulsar",
            value=c.blocked_total,
        )
        errors = CounterMetricFamily(
            "starlight_protocol_errors",
            "Connection.Close and Channel.Close sent by the gateway for an error, by reply code",
            labels=["reply_code"],
        )
        for code, count in sorted(c.protocol_errors.items()):
            errors.add_metric([str(code)], count)
        yield errors
        failures = CounterMetricFamily(
            "starlight_auth_failures",
            "Failed logins, by SASL mechanism",
            labels=["mechanism"],
        )
        for mechanism, count in sorted(c.auth_failures.items()):
            failures.add_metric([mechanism], count)
        yield failures
        yield from self._fleet()

    def _fleet(self) -> Iterator[Metric]:
        c = self._c
        if self._zookeeper_connected is not None:
            yield GaugeMetricFamily(
                "starlight_zookeeper_connected",
                "1 while this replica's ZooKeeper session is connected",
                value=1 if self._zookeeper_connected() else 0,
            )
        leading = GaugeMetricFamily(
            "starlight_leader",
            "1 for each namespace (vhost) this replica leads (reaper, cleaner, reconciler)",
            # Not "namespace": Kubernetes scrapes add that label (the pod's namespace).
            labels=["pulsar_namespace", "vhost"],
        )
        for namespace in sorted(c.leading):
            leading.add_metric([namespace, c.namespace_label(namespace)], 1)
        yield leading
        for attribute, name, documentation in (
            ("leader_rounds", "leader_rounds", "Rounds of leader-elected work done, by job"),
            (
                "leader_round_failures",
                "leader_round_failures",
                "Rounds of leader-elected work that failed, by job",
            ),
            (
                "leader_removals",
                "leader_removals",
                "Queues (reaper) and subscriptions (cleaner) removed by leader-elected work",
            ),
        ):
            # Not "job": Prometheus's own target label.
            family = CounterMetricFamily(f"starlight_{name}", documentation, labels=["task"])
            for job, count in sorted(getattr(c, attribute).items()):
                family.add_metric([job], count)
            yield family
        yield CounterMetricFamily(
            "starlight_usage_events_published",
            "Usage events published to Pulsar",
            value=c.usage_events_published,
        )
        yield CounterMetricFamily(
            "starlight_usage_event_failures",
            "Attempts to publish a usage event that failed (retried next window)",
            value=c.usage_event_failures,
        )
        if self._pulsar_clients is not None:
            producers, consumers = self._pulsar_clients()
            yield GaugeMetricFamily(
                "starlight_pulsar_producers", "Pulsar producers open", value=producers
            )
            yield GaugeMetricFamily(
                "starlight_pulsar_consumers", "Pulsar consumers open", value=consumers
            )
        if self._checks is not None:
            ready = GaugeMetricFamily(
                "starlight_ready",
                "1 when the readiness check passes (/readyz needs all of them)",
                labels=["check"],
            )
            for check, ok in self._checks().items():
                ready.add_metric([check], 1 if ok else 0)
            yield ready


def identity_families(identity: Identity) -> Iterator[Metric]:
    """rabbitmq_build_info and rabbitmq_identity_info of ``identity``."""
    # RabbitMQ declares both as untyped; a gauge of 1 is the same series to Prometheus.
    build = GaugeMetricFamily(
        "rabbitmq_build_info",
        "RabbitMQ & Erlang/OTP version info (here: the gateway's and Python's)",
        labels=[
            "rabbitmq_version",
            "prometheus_plugin_version",
            "prometheus_client_version",
            "erlang_version",
            "product_name",
            "product_version",
        ],
    )
    python = ".".join(map(str, sys.version_info[:3]))
    build.add_metric(
        [
            __version__,
            __version__,
            _client_version(),
            python,
            "Starlight for RabbitMQ",
            __version__,
        ],
        1,
    )
    yield build
    info = GaugeMetricFamily(
        "rabbitmq_identity_info",
        "RabbitMQ node & cluster identity info",
        labels=["rabbitmq_node", "rabbitmq_cluster", "rabbitmq_endpoint"],
    )
    info.add_metric([identity.node, identity.cluster, identity.endpoint], 1)
    yield info


def exposition(collector: Collector) -> bytes:
    """The text exposition format of ``collector``'s metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)


def _client_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("prometheus-client")
    except PackageNotFoundError:
        return "unknown"


def _resident_memory() -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _total_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0
