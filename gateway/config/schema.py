"""The schema: one :class:`GatewayConfig` field per key, in documentation order.

The keys, their names and their defaults are the contract of the reference documents
(``reference/002`` and ``reference/001``); a handful of gateway-specific keys are added and
marked as ours (``ours=True``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Final

from gateway.config.address import Listener
from gateway.config.derived import DerivedValues
from gateway.config.keys import (
    _A,
    _AUTH,
    _BC,
    _GW,
    _MAX_UINT32,
    _PKCS12_ONLY,
    _TLS,
    _VH,
    AMQP_FRAME_MIN_SIZE,
    ConfigKey,
    Kind,
    MetricsListener,
    _key,
)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class GatewayConfig(DerivedValues):
    """The validated configuration: one attribute per key, named exactly like the key
    (camelCase, so that ``config.amqpListeners`` greps to the file and the reference).
    Derived values the server needs are snake_case properties (``frame_max``, ...).

    Build it with :func:`load_config` or :func:`config_from_text`; derive variants with
    :func:`dataclasses.replace` (which does not re-validate).
    """

    # ---- General and AMQP (reference/002, first table) ----------------------------------
    configurationStoreServers: str = field(
        metadata=_key(
            Kind.ZOOKEEPER,
            "",
            """ZooKeeper connection string of the configuration store that holds the AMQP
            metadata (under the fixed prefix `/starlight-rabbitmq`): comma-separated
            `host[:port]` (port 2181 by default), optionally followed by a `/chroot` (created
            when missing). A `zk:` prefix (Pulsar's metadata-store URL form) is accepted and
            removed. The replicas with the same servers and chroot are one fleet
            (docs/fleet.md, "What makes a fleet").""",
            _A,
            required=True,
        )
    )
    amqpListeners: tuple[Listener, ...] = field(
        metadata=_key(
            Kind.LISTENERS,
            "amqp://127.0.0.1:5672",
            """Addresses the gateway listens on for AMQP clients, comma-separated
            `amqp://<host>:<port>` or `amqps://<host>:<port>` (the port defaults to 5672 and
            5671). An `amqps` listener needs a certificate (see TLS). `amqp+unix:///<absolute
            path>` listens on a Unix domain socket (created with mode 0600; the Pulsar proxy
            extension's relay uses one).""",
            _A,
        )
    )
    advertisedAddress: str = field(
        metadata=_key(
            Kind.HOST,
            "",
            """Host name or IP address of this gateway as seen by clients and by the other
            replicas. Empty: the host of the first listener, or the machine's host name when
            that listener binds a wildcard address. (In the reference's examples only.)""",
            _A,
        )
    )
    amqpSessionCountLimit: int = field(
        metadata=_key(
            Kind.INT,
            "256",
            """Maximum number of channels (sessions) open at once on one AMQP connection;
            offered as channel-max in Connection.Tune.""",
            _A,
            minimum=1,
            maximum=65535,
        )
    )
    amqpHeartbeatDelay: int = field(
        metadata=_key(
            Kind.INT,
            "0",
            """Heartbeat interval in seconds offered in Connection.Tune. Clients may negotiate
            a different interval or disable heartbeats altogether (0).""",
            _A,
            minimum=0,
            maximum=65535,
        )
    )
    amqpHeartbeatTimeoutFactor: int = field(
        metadata=_key(
            Kind.INT,
            "2",
            """A connection is considered broken when nothing has been received from the peer
            for the negotiated heartbeat interval times this factor.""",
            _A,
            minimum=1,
        )
    )
    amqpNetworkBufferSize: int = field(
        metadata=_key(
            Kind.INT,
            "2097152",
            """Network buffer size in bytes (2 MB); also the largest frame accepted, offered as
            frame-max in Connection.Tune. At least 4096, AMQP's frame-min-size.""",
            _A,
            minimum=AMQP_FRAME_MIN_SIZE,
            maximum=_MAX_UINT32,
        )
    )
    amqpMaxMessageSize: int = field(
        metadata=_key(
            Kind.INT,
            "104857600",
            "Largest message body in bytes (100 MB) accepted from a publisher.",
            _A,
            minimum=1,
        )
    )
    amqpDebugBinaryDataLength: int = field(
        metadata=_key(
            Kind.INT,
            "80",
            "How many bytes of binary data (bodies, frames) are written to debug logs.",
            _A,
            minimum=0,
        )
    )
    amqpConnectionCloseTimeout: int = field(
        metadata=_key(
            Kind.INT,
            "2000",
            """Milliseconds to wait for Connection.Close-Ok after sending Connection.Close,
            and for the client to close its socket after the gateway's Close-Ok (meanwhile
            what it sends is read and discarded, as RabbitMQ does); the socket is closed
            anyway when either does not come.""",
            _A,
            minimum=0,
        )
    )
    amqpBatchingEnabled: bool = field(
        metadata=_key(
            Kind.BOOL,
            "true",
            """Whether the Pulsar producers of the gateway batch messages. They batch only
            where the broker keeps batch-index acknowledgements
            (acknowledgmentAtBatchIndexLevelEnabled=true; elsewhere one message per entry):
            cheaper publishing, but a consumer is sent a whole batch at once
            (docs/compatibility.md, "Settlement").""",
            _A,
        )
    )

    # ---- Authentication (reference/002, second table) -----------------------------------
    authenticationEnabled: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Whether AMQP clients must authenticate. When false, any credentials are
            accepted, so the gateway then refuses to start with an AMQP listener on an address
            other than loopback unless amqpAllowUnauthenticatedRemote=true.""",
            _AUTH,
        )
    )
    amqpAuthenticationMechanisms: tuple[str, ...] = field(
        metadata=_key(
            Kind.MECHANISMS,
            "PLAIN",
            """SASL mechanisms offered to clients, comma-separated, from PLAIN, AMQPLAIN and
            EXTERNAL. PLAIN and AMQPLAIN take a JWT as the password (the username is ignored);
            EXTERNAL authenticates with the common name of the TLS client certificate and needs
            an amqps listener. With authenticationEnabled=false, AMQPLAIN is offered too
            wherever PLAIN is, as RabbitMQ offers both (no credentials are checked then).""",
            _AUTH,
        )
    )
    tokenSecretKey: str = field(
        metadata=_key(
            Kind.TOKEN_KEY,
            "",
            """Secret (HMAC) key that validates JWTs: `data:;base64,<key>` or
            `file:///path/to/key` (DER-encoded). With authentication and PLAIN or AMQPLAIN,
            set exactly one of tokenSecretKey and tokenPublicKey.""",
            _AUTH,
            secret=True,
        )
    )
    tokenPublicKey: str = field(
        metadata=_key(
            Kind.TOKEN_KEY,
            "",
            """Public (RSA or EC) key that validates JWTs, in the same forms as
            tokenSecretKey.""",
            _AUTH,
        )
    )
    tokenAuthClaim: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "JWT claim used as the principal (role). Empty: the `sub` claim.",
            _AUTH,
        )
    )
    tokenAudienceClaim: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """JWT claim holding the audience, e.g. `aud`. Empty: the audience is not
            verified.""",
            _AUTH,
        )
    )
    tokenAudience: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """The audience this gateway stands for: the tokenAudienceClaim of a valid token
            must contain it. Required when tokenAudienceClaim is set.""",
            _AUTH,
        )
    )

    # ---- Broker client (reference/002, third table) -------------------------------------
    brokerServiceURL: str = field(
        metadata=_key(
            Kind.PULSAR_URL,
            "",
            """Pulsar binary-protocol URL of the brokers (or a Pulsar proxy):
            `pulsar://host:6650` or `pulsar+ssl://host:6651`, several hosts
            comma-separated.""",
            _BC,
            required=True,
        )
    )
    brokerWebServiceURL: str = field(
        metadata=_key(
            Kind.WEB_URL,
            "",
            """Pulsar admin REST URL of the brokers: `http://host:8080` or
            `https://host:8443`, several hosts comma-separated (`http://b1:8080,b2:8080`: one
            serves until it fails, then the next).""",
            _BC,
            required=True,
        )
    )
    brokerClientAuthenticationPlugin: str = field(
        metadata=_key(
            Kind.AUTH_PLUGIN,
            "",
            """How the gateway authenticates to Pulsar: a Pulsar client authentication class
            (`org.apache.pulsar.client.impl.auth.AuthenticationToken`, `...AuthenticationTls`,
            `...AuthenticationBasic`, `...oauth2.AuthenticationOAuth2`) or the short name
            token, tls, basic or oauth2. Empty: no authentication.""",
            _BC,
        )
    )
    brokerClientAuthenticationParameters: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """Parameters of brokerClientAuthenticationPlugin in the Pulsar client's string
            form, e.g. `token:<jwt>` or `file:///path/to/token`.""",
            _BC,
            secret=True,
        )
    )
    amqpBrokerClientAuthenticationParameters: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """If set, used instead of brokerClientAuthenticationParameters, so that the
            gateway can have its own credentials when it shares a configuration file with a
            Pulsar proxy.""",
            _BC,
            secret=True,
        )
    )
    tlsEnabledWithBroker: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Use TLS to the brokers. Requires `pulsar+ssl://` and `https://` URLs (a
            `pulsar+ssl://` URL uses TLS whatever this says).""",
            _BC,
        )
    )
    brokerClientTrustCertsFilePath: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """PEM file of the CA certificates trusted for the brokers' TLS certificates (binary
            protocol and admin API). Empty: certifi's CA bundle.""",
            _BC,
        )
    )
    brokerClientTlsEnabledWithKeyStore: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Read the brokers' trusted CAs from brokerClientTlsTrustStore instead of
            brokerClientTrustCertsFilePath.""",
            _BC,
        )
    )
    brokerClientTlsTrustStoreType: str = field(
        metadata=_key(
            Kind.STORE_TYPE,
            "PKCS12",
            "Type of brokerClientTlsTrustStore. " + _PKCS12_ONLY,
            _BC,
        )
    )
    brokerClientTlsTrustStore: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "Path of the PKCS#12 trust store with the CAs trusted for the brokers.",
            _BC,
        )
    )
    brokerClientTlsTrustStorePassword: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "Password of brokerClientTlsTrustStore.",
            _BC,
            secret=True,
        )
    )

    # ---- TLS (reference/002, fourth table) ----------------------------------------------
    tlsCertRefreshCheckDurationSec: int = field(
        metadata=_key(
            Kind.INT,
            "300",
            """How often, in seconds, the certificate and key files are checked for changes
            and reloaded. 0: check on every new connection.""",
            _TLS,
            minimum=0,
        )
    )
    tlsCertificateFilePath: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "PEM certificate (chain) presented by the amqps listeners.",
            _TLS,
        )
    )
    tlsKeyFilePath: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "PEM private key of tlsCertificateFilePath.",
            _TLS,
        )
    )
    tlsTrustCertsFilePath: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """PEM file of the CA certificates trusted for client certificates (needed by
            EXTERNAL and by tlsRequireTrustedClientCertOnConnect).""",
            _TLS,
        )
    )
    tlsAllowInsecureConnection: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Let clients connect whatever client certificate they hold: none is requested,
            so none is used for authentication (EXTERNAL is refused). Python's TLS cannot ask
            for a certificate and then accept one it cannot verify. Also accepts a Pulsar
            broker certificate that cannot be verified (with a warning at start-up).""",
            _TLS,
        )
    )
    tlsHostnameVerificationEnabled: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Verify the brokers' host names against their certificates when the gateway
            connects to Pulsar with TLS.""",
            _TLS,
        )
    )
    tlsRequireTrustedClientCertOnConnect: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Require a client certificate signed by a trusted CA on amqps connections;
            connections without one are rejected.""",
            _TLS,
        )
    )
    tlsProtocols: tuple[str, ...] = field(
        metadata=_key(
            Kind.TLS_PROTOCOLS,
            "",
            """TLS versions allowed on the amqps listeners, comma-separated: TLSv1.3,
            TLSv1.2 (TLSv1.1 and TLSv1 only where Python's ssl module still supports them).
            Empty: Python's defaults.""",
            _TLS,
        )
    )
    tlsCiphers: tuple[str, ...] = field(
        metadata=_key(
            Kind.TLS_CIPHERS,
            "",
            """Cipher suites allowed on the amqps listeners, comma-separated, e.g.
            TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256. Empty: Python's defaults. Only the form of
            each name is checked here.""",
            _TLS,
        )
    )
    tlsEnabledWithKeyStore: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Read the listeners' certificate and key from tlsKeyStore and the trusted client
            CAs from tlsTrustStore, instead of the PEM file paths.""",
            _TLS,
        )
    )
    tlsProvider: str = field(
        metadata=_key(
            Kind.TLS_PROVIDER,
            "",
            """TLS provider. Python always uses the OpenSSL library of its ssl module, so only
            empty, JDK or OpenSSL are accepted, and all three mean that.""",
            _TLS,
        )
    )
    tlsKeyStoreType: str = field(
        metadata=_key(
            Kind.STORE_TYPE,
            "PKCS12",
            "Type of tlsKeyStore. " + _PKCS12_ONLY,
            _TLS,
        )
    )
    tlsKeyStore: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "Path of the PKCS#12 key store with the listeners' certificate and private key.",
            _TLS,
        )
    )
    tlsKeyStorePassword: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "Password of tlsKeyStore.",
            _TLS,
            secret=True,
        )
    )
    tlsTrustStoreType: str = field(
        metadata=_key(
            Kind.STORE_TYPE,
            "PKCS12",
            "Type of tlsTrustStore. " + _PKCS12_ONLY,
            _TLS,
        )
    )
    tlsTrustStore: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "Path of the PKCS#12 trust store with the CAs trusted for client certificates.",
            _TLS,
        )
    )
    tlsTrustStorePassword: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            "Password of tlsTrustStore.",
            _TLS,
            secret=True,
        )
    )

    # ---- Vhost mapping (reference/001) --------------------------------------------------
    amqpDefaultTenant: str = field(
        metadata=_key(
            Kind.PULSAR_NAME,
            "public",
            "Pulsar tenant used to map the vhost `/` and short vhosts.",
            _VH,
        )
    )
    amqpDefaultNamespace: str = field(
        metadata=_key(
            Kind.PULSAR_NAME,
            "default",
            """Pulsar namespace used to map the vhost `/` (and short vhosts when
            amqpMapShortVhostToTenant is true).""",
            _VH,
        )
    )
    amqpMapShortVhostToTenant: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Map a short vhost `x` (no slash inside) to the namespace
            `x/<amqpDefaultNamespace>` instead of `<amqpDefaultTenant>/x`.""",
            _VH,
        )
    )

    # ---- Gateway-specific ---------------------------------------------------------------
    # The rollup job's keys (`starlight-rabbitmq rollup -c`, docs/rollup.md): it reads the
    # gateway's file for the broker-client keys, so that it uses the same credentials.
    rollupWindowSeconds: tuple[int, ...] = field(
        metadata=_key(
            Kind.SECONDS_LIST,
            "60,3600",
            """Rollup job: the lengths of the event-time windows it sums per vhost, in
            seconds (each length gives its own rows).""",
            _GW,
            ours=True,
        )
    )
    rollupWatermarkSeconds: int = field(
        metadata=_key(
            Kind.INT,
            "120",
            """Rollup job: how late (in event time) a usage event may arrive and still be
            counted; a window's row is written once the watermark passes its end. Later
            events are dropped and counted in the job's log.""",
            _GW,
            ours=True,
            minimum=0,
        )
    )
    rollupTriggerSeconds: int = field(
        metadata=_key(
            Kind.INT,
            "10",
            "Rollup job: seconds between micro-batches.",
            _GW,
            ours=True,
            minimum=1,
        )
    )
    rollupCheckpointLocation: str = field(
        metadata=_key(
            Kind.STRING,
            "rollup/checkpoint",
            """Rollup job: Spark's checkpoint directory (any Hadoop file system URL on a
            cluster). Keep it: it holds the job's position and window state.""",
            _GW,
            ours=True,
        )
    )
    rollupParquetPath: str = field(
        metadata=_key(
            Kind.STRING,
            "rollup/parquet",
            "Rollup job: directory of the Parquet output, partitioned by date. Empty: none.",
            _GW,
            ours=True,
        )
    )
    rollupPostgresUrl: str = field(
        metadata=_key(
            Kind.STRING,
            "",
            """Rollup job: `postgresql://user:password@host:port/database` of the
            PostgreSQL output (upserted per vhost and window). Empty: none.""",
            _GW,
            ours=True,
            secret=True,
        )
    )
    rollupPostgresTable: str = field(
        metadata=_key(
            Kind.STRING,
            "vhost_throughput",
            "Rollup job: the PostgreSQL table (created if missing), `name` or `schema.name`.",
            _GW,
            ours=True,
        )
    )
    rollupSubscription: str = field(
        metadata=_key(
            Kind.STRING,
            "starlight-rollup",
            """Rollup job: the durable subscription that keeps the usage events it has not
            committed from Pulsar's retention (the job's position is in its checkpoint).""",
            _GW,
            ours=True,
        )
    )
    amqpAutoCreateVhosts: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Create the Pulsar namespace (and its tenant when missing) of a vhost that does
            not exist when a client first opens it, as `starlight-rabbitmq vhosts add` does.
            False: Connection.Open of an unknown vhost gets 530 NOT_ALLOWED, as on RabbitMQ.
            With authorizationEnabled, only a user with permissions on the vhost (or a
            super-user) gets that far (docs/vhosts.md).""",
            _GW,
            ours=True,
        )
    )
    amqpLazySubscriptions: bool = field(
        metadata=_key(
            Kind.BOOL,
            "true",
            """Create a queue's Pulsar subscription on a per-routing-key topic (its own
            default-exchange topic, a direct or topic exchange's key) only once a message is
            published there through the gateway, not at declare and bind: declare+bind costs
            no Pulsar topic (docs/fleet.md, "Lazy subscriptions"). Set false when native Pulsar
            producers write to those topics directly and AMQP queues must receive it.""",
            _GW,
            ours=True,
        )
    )
    amqpPriorityQueueReadAhead: int = field(
        metadata=_key(
            Kind.INT,
            "100",
            """Messages a consumer (or the Basic.Get reader) of a priority queue
            (`x-max-priority`) reads ahead from Pulsar and orders by priority, at least its
            prefetch: the window within which the highest priority is delivered first
            (docs/compatibility.md, "Priority queues"). Larger orders a longer backlog, but
            each consumer then holds more messages that the queue's other consumers cannot
            have until it delivers them.""",
            _GW,
            ours=True,
            minimum=1,
        )
    )
    authorizationEnabled: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Check that an authenticated role may use the vhost it opens; roles in
            superUserRoles may use every vhost. Requires authenticationEnabled. (The reference
            has no authorization: every authenticated user may use every vhost.)""",
            _GW,
            ours=True,
        )
    )
    amqpAllowUnauthenticatedRemote: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Let the gateway start with authenticationEnabled=false and an AMQP listener on
            an address other than loopback (`127.0.0.0/8`, `::1`, `localhost`; an amqp+unix
            socket counts as local), so that anyone who reaches it connects with any
            credentials: it then logs a warning at start. Without it such a start is refused,
            as RabbitMQ lets its default user in from loopback only.""",
            _GW,
            ours=True,
        )
    )
    superUserRoles: tuple[str, ...] = field(
        metadata=_key(
            Kind.STRING_LIST,
            "",
            "Roles allowed everything when authorizationEnabled is true, comma-separated.",
            _GW,
            ours=True,
        )
    )
    amqpHandshakeTimeoutMs: int = field(
        metadata=_key(
            Kind.INT,
            "10000",
            """Milliseconds a new connection has to complete the AMQP handshake (protocol
            header to Connection.Open-Ok); a connection that takes longer is closed.""",
            _GW,
            ours=True,
            minimum=1,
        )
    )
    metricsListener: MetricsListener | None = field(
        metadata=_key(
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
        metadata=_key(
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
        metadata=_key(
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
        metadata=_key(
            Kind.STRING,
            "starlight-rabbitmq",
            """The `rabbitmq_cluster` label of `rabbitmq_identity_info`: the name of the fleet
            as RabbitMQ's dashboards show it. Give every replica of one fleet the same name.""",
            _GW,
            ours=True,
        )
    )
    amqpNodeName: str = field(
        metadata=_key(
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
        metadata=_key(
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
        metadata=_key(
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
        metadata=_key(
            Kind.BOOL,
            "true",
            """Publish one usage event per active vhost every usageEventsIntervalSeconds to
            usageEventsTopic (the input of the Spark rollup; docs/observability.md).""",
            _GW,
            ours=True,
        )
    )
    usageEventsTopic: str = field(
        metadata=_key(
            Kind.TOPIC,
            "persistent://public/starlight-system/usage-events",
            """The Pulsar topic of the usage events (its namespace is created if missing, with
            producer deduplication on).""",
            _GW,
            ours=True,
        )
    )
    usageEventsIntervalSeconds: int = field(
        metadata=_key(
            Kind.INT,
            "10",
            "Seconds per usage-event window.",
            _GW,
            ours=True,
            minimum=1,
        )
    )
    gatewayCompiledHotPath: bool = field(
        metadata=_key(
            Kind.BOOL,
            "true",
            """Use the gateway's compiled modules when `make install` built them: the
            per-message calls into pulsar-client (a message's arrival and acknowledgement, a
            group's sends and receipts; docs/pulsar-layer.md, "The compiled module") and the
            scan of each socket read's Basic.Publish and Basic.Ack frames (docs/protocol.md,
            "The compiled frame scan"); false, or where one is not built: pulsar-client's
            Python binding and the Python frame path, with the same behaviour at a higher CPU
            cost per message.""",
            _GW,
            ours=True,
        )
    )
    gatewayMemoryAllocator: str = field(
        metadata=_key(
            Kind.ALLOCATOR,
            "auto",
            """The process's memory allocator: `jemalloc` (the `starlight-rabbitmq` command
            re-executes itself once with it in `LD_PRELOAD`; it refuses to start where the
            system has no jemalloc library: Debian's `libjemalloc2`), `system` (the C
            library's) or `auto` (jemalloc where the system has it, else the C library's).
            With jemalloc the gateway spent ~0.8x the CPU per message under PerfTest
            (docs/performance.md); the C library's allocator spends much of its time merging
            small freed blocks whenever a message-sized block is asked for.""",
            _GW,
            ours=True,
        )
    )
    amqpProxyProtocolTrustedNetworks: tuple[str, ...] = field(
        metadata=_key(
            Kind.NETWORKS,
            "",
            """Peers allowed to send a PROXY protocol v2 header (HAProxy `send-proxy-v2`, a
            cloud load balancer, the Pulsar proxy extension's relay): comma-separated CIDR
            networks such as `10.0.0.0/8` or `127.0.0.1/32`, and `unix` for the peers of
            amqp+unix listeners. A connection from such a peer must start with the header,
            and the client address it carries is the connection's peer in logs, login
            throttling and authorization. A PROXY header from any other peer is refused.
            Empty: no PROXY header is accepted.""",
            _GW,
            ours=True,
        )
    )
    zooKeeperSessionTimeoutMs: int = field(
        metadata=_key(
            Kind.INT,
            "30000",
            """ZooKeeper session timeout in milliseconds for the metadata store: how long the
            ephemeral znodes of a gateway that died outlive it.""",
            _GW,
            ours=True,
            minimum=1000,
        )
    )

    def __repr__(self) -> str:
        # Secrets (passwords, HMAC keys, broker credentials) never reach logs through repr.
        parts = []
        for spec in SCHEMA:
            value = getattr(self, spec.name)
            shown = "'<hidden>'" if spec.secret and value else repr(value)
            parts.append(f"{spec.name}={shown}")
        return f"GatewayConfig({', '.join(parts)})"


def _build_schema() -> tuple[ConfigKey, ...]:
    specs = []
    for f in dataclasses.fields(GatewayConfig):
        spec = f.metadata["key"]
        assert isinstance(spec, ConfigKey)
        specs.append(dataclasses.replace(spec, name=f.name))
    return tuple(specs)


SCHEMA: Final = _build_schema()
KEYS_BY_NAME: Final = {spec.name: spec for spec in SCHEMA}


def describe_keys() -> tuple[ConfigKey, ...]:
    """Every configuration key, in documentation order (sections as in the reference)."""
    return SCHEMA
