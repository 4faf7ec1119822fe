"""Gateway-specific keys: metrics, the management API, the node's identity, usage events."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import Kind, MetricsListener, Section, key_metadata
from gateway.config.schema.access import AccessKeys

# Every key of this module is in one section of the documentation.
_GW = Section.GATEWAY


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ObservabilityKeys(AccessKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    metricsListener: MetricsListener | None = field(
        metadata=key_metadata(
            Kind.METRICS_URL,
            "http://0.0.0.0:15692",
            """The HTTP listener serving /metrics (Prometheus), /healthz (the process is
            alive) and /readyz (ready for clients: listening, ZooKeeper connected, Pulsar
            reachable, metadata loaded, not draining), as `http://<host>:<port>`; 15692 is
            RabbitMQ's Prometheus port. Port 0 picks a free port. Empty disables it. Replaces
            the earlier `httpServerPort` key.""",
            _GW,
            ours=True,
        )
    )
    managementListener: MetricsListener | None = field(
        metadata=key_metadata(
            Kind.MANAGEMENT_URL,
            "",
            """The HTTP listener of RabbitMQ's management API (`/api/...`: queues, exchanges,
            bindings, vhosts, permissions, connections of the whole fleet, definitions; see
            docs/management.md), as `http://<host>:<port>` or `https://<host>:<port>` (TLS
            with the AMQP listeners' certificate, tlsCertificateFilePath); 15672 is
            RabbitMQ's port. Empty (the default) disables it. Users log in with HTTP basic
            credentials checked like an AMQP PLAIN login.""",
            _GW,
            ours=True,
        )
    )
    managementMonitoringRoles: tuple[str, ...] = field(
        metadata=key_metadata(
            Kind.STRING_LIST,
            "",
            """Principals with RabbitMQ's `monitoring` user tag in the management API
            (comma-separated): they see every vhost, connection and node but change nothing
            outside their permissions. `superUserRoles` are `administrator`; every other user
            is `administrator` when authorizationEnabled is false, `management` otherwise.""",
            _GW,
            ours=True,
        )
    )
    amqpClusterName: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "starlight-rabbitmq",
            """The `rabbitmq_cluster` label of `rabbitmq_identity_info`: the name of the fleet
            as RabbitMQ's dashboards show it. Give every replica of one fleet the same name.""",
            _GW,
            ours=True,
        )
    )
    amqpNodeName: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """The `rabbitmq_node` label of the metrics and the replica name in usage events:
            this replica. Empty means `rabbit@<host name>` (RabbitMQ's node naming; in
            Kubernetes the host name is the pod name). Give each replica its own.""",
            _GW,
            ours=True,
        )
    )
    amqpServerProduct: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "RabbitMQ",
            """`product` in the server properties of Connection.Start. RabbitMQ's clients read
            it: kombu/Celery look at `version` (and so choose RabbitMQ's per-channel meaning of
            Basic.Qos global) only when it is `RabbitMQ`; amqplib's tests assert it and
            amqp091-go's skip for any other product. The gateway's own version is sent as
            `starlight_version` whatever this says.""",
            _GW,
            ours=True,
        )
    )
    amqpServerVersion: str = field(
        metadata=key_metadata(
            Kind.RABBITMQ_VERSION,
            "3.13.7",
            """`version` in the server properties of Connection.Start: the RabbitMQ version
            clients compare against to choose behaviour (kombu's Basic.Qos semantics, the Java
            client's version-gated code). Numbers only, `major.minor[.patch]`, as clients
            parse it.""",
            _GW,
            ours=True,
        )
    )
    usageEventsEnabled: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "true",
            """Publish one usage event per active vhost every usageEventsIntervalSeconds to
            usageEventsTopic (the input of the Spark rollup; docs/observability.md).""",
            _GW,
            ours=True,
        )
    )
    usageEventsTopic: str = field(
        metadata=key_metadata(
            Kind.TOPIC,
            "persistent://public/starlight-system/usage-events",
            """The Pulsar topic of the usage events (its namespace is created if missing, with
            producer deduplication on).""",
            _GW,
            ours=True,
        )
    )
    usageEventsIntervalSeconds: int = field(
        metadata=key_metadata(
            Kind.INT,
            "10",
            "Seconds per usage-event window.",
            _GW,
            ours=True,
            minimum=1,
        )
    )
