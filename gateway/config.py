"""Gateway configuration: the ``key=value`` file, ``STARLIGHT_<key>`` overrides, validation.

The keys, their names and their defaults are the contract of the reference documents
(``reference/002`` and ``reference/001``); a handful of gateway-specific keys are added and
marked as ours.  :class:`GatewayConfig` is the single source of truth: every field carries a
:class:`ConfigKey` in its metadata, so the README table, ``conf/gateway.conf`` and the loader are
all generated from the same list (:func:`describe_keys`).

Everything that can go wrong with user input surfaces as :class:`ConfigError`, whose message is
one line naming the key (and ``file:line`` or the environment variable it came from).  The loader
validates forms only: it never opens key, certificate or store files (the TLS and auth layers do).

See ``docs/configuration.md`` for the decisions taken where the reference is silent.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import enum
import ipaddress
import os
import re
import socket
import ssl
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

# The shell binds what amqpListeners lists: one listener type from here to the socket.
from gateway.server.address import UNIX_SCHEME, Listener

__all__ = [
    "ENV_PREFIX",
    "ConfigError",
    "ConfigKey",
    "GatewayConfig",
    "Kind",
    "Listener",
    "Section",
    "config_from_text",
    "describe_keys",
    "load_config",
    "render_example_conf",
    "render_markdown_table",
]

#: Environment variables ``STARLIGHT_<key>`` (key spelled exactly as in the file) override it.
ENV_PREFIX: Final = "STARLIGHT_"

#: AMQP 0-9-1 ``frame-min-size`` (spec 4.2.3): no peer may be offered a smaller frame-max.
AMQP_FRAME_MIN_SIZE: Final = 4096

_MAX_UINT32: Final = 2**32 - 1


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """Escape every non-printable character so that a message can never span lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class ConfigError(Exception):
    """Bad configuration. ``str(error)`` is one line naming the key and where it came from."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        message = _one_line(message)
        super().__init__(message)
        self.message = message
        #: The configuration key (or environment variable) at fault, when there is one.
        self.key = key

    def __str__(self) -> str:
        return self.message


class _Invalid(Exception):
    """Raised by a value parser; turned into a ConfigError that names the key and source."""


def _show(value: str, limit: int = 80) -> str:
    """A value quoted for an error message: repr (escapes control characters), shortened."""
    if len(value) > limit:
        value = value[:limit] + "..."
    return repr(value)


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


class Section(enum.Enum):
    """Groups of keys, in the order of the reference's tables; the value is the title."""

    AMQP = "General and AMQP"
    AUTHENTICATION = "Authentication"
    BROKER_CLIENT = "Broker client (the gateway's connection to Pulsar)"
    TLS = "TLS"
    VHOST_MAPPING = "Vhost mapping (multi-tenancy)"
    GATEWAY = "Gateway-specific (not in the reference)"


class Kind(enum.Enum):
    """How a value is parsed; the value is the label shown in the documentation."""

    STRING = "string"
    HOST = "host name or IP address"
    PULSAR_NAME = "Pulsar tenant/namespace name"
    INT = "integer"
    BOOL = "boolean"
    STRING_LIST = "comma-separated list"
    LISTENERS = "comma-separated amqp[s]:// or amqp+unix:// URLs"
    NETWORKS = "comma-separated CIDR networks (or unix)"
    MECHANISMS = "comma-separated SASL mechanisms"
    TLS_PROTOCOLS = "comma-separated TLS versions"
    TLS_CIPHERS = "comma-separated cipher suites"
    STORE_TYPE = "key store type"
    TLS_PROVIDER = "TLS provider"
    TOKEN_KEY = "data: or file: URL"
    PULSAR_URL = "pulsar:// URL"
    WEB_URL = "http:// URL"
    ZOOKEEPER = "ZooKeeper connection string"
    AUTH_PLUGIN = "authentication plugin"
    SECONDS_LIST = "comma-separated seconds"
    METRICS_URL = "http://<host>:<port> URL, or empty"
    TOPIC = "Pulsar topic name"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One configuration key: everything the loader and the generators need to know."""

    #: The key as written in the file (and after ``STARLIGHT_`` in the environment); also the
    #: name of the :class:`GatewayConfig` attribute that holds the parsed value.
    name: str
    kind: Kind
    #: The default exactly as it would be written in the file ("" is an empty value).
    default: str
    description: str
    section: Section
    #: A required key has no default and must be set to a non-empty value.
    required: bool = False
    #: Added by this gateway; not a key of the reference.
    gateway_specific: bool = False
    #: Never echoed in error messages, shown as hidden in ``repr(GatewayConfig)``.
    secret: bool = False
    minimum: int | None = None
    maximum: int | None = None

    @property
    def type(self) -> str:
        """A human-readable type, with the allowed range for integers."""
        if self.kind is Kind.INT:
            if self.minimum is not None and self.maximum is not None:
                return f"integer {self.minimum}..{self.maximum}"
            if self.minimum is not None:
                return f"integer >= {self.minimum}"
        return self.kind.value

    @property
    def env_var(self) -> str:
        """The environment variable that overrides this key."""
        return ENV_PREFIX + self.name


def _key(
    kind: Kind,
    default: str,
    description: str,
    section: Section,
    *,
    required: bool = False,
    ours: bool = False,
    secret: bool = False,
    minimum: int | None = None,
    maximum: int | None = None,
) -> dict[str, ConfigKey]:
    """Field metadata for one key; the name is filled in from the field name below."""
    spec = ConfigKey(
        name="",
        kind=kind,
        default=default,
        description=" ".join(description.split()),
        section=section,
        required=required,
        gateway_specific=ours,
        secret=secret,
        minimum=minimum,
        maximum=maximum,
    )
    return {"key": spec}


_A = Section.AMQP
_AUTH = Section.AUTHENTICATION
_BC = Section.BROKER_CLIENT
_TLS = Section.TLS
_VH = Section.VHOST_MAPPING
_GW = Section.GATEWAY

_PKCS12_ONLY = (
    "Only PKCS12: Java's JKS format cannot be read from Python (convert it with "
    "`keytool -importkeystore -deststoretype PKCS12`). The reference's Java default is JKS."
)


#: In amqpProxyProtocolTrustedNetworks: the peers of amqp+unix listeners.
UNIX_PEERS: Final = "unix"


@dataclass(frozen=True, slots=True)
class MetricsListener:
    """``metricsListener``: where /metrics, /healthz and /readyz are served."""

    host: str  # without IPv6 brackets
    port: int  # 0: a free port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def __str__(self) -> str:
        return self.url


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class GatewayConfig:
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
            `host[:port]` (port 2181 by default), optionally followed by a `/chroot`. A `zk:`
            prefix (Pulsar's metadata-store URL form) is accepted and removed.""",
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
            """Milliseconds to wait for Connection.Close-Ok after sending Connection.Close;
            the socket is closed anyway when it does not come.""",
            _A,
            minimum=0,
        )
    )
    amqpBatchingEnabled: bool = field(
        metadata=_key(
            Kind.BOOL,
            "true",
            "Whether the Pulsar producers of the gateway batch messages.",
            _A,
        )
    )

    # ---- Authentication (reference/002, second table) -----------------------------------
    authenticationEnabled: bool = field(
        metadata=_key(
            Kind.BOOL,
            "false",
            """Whether AMQP clients must authenticate. When false, any credentials are
            accepted.""",
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
            an amqps listener.""",
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
            `https://host:8443`.""",
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

    # ---- Derived values the server needs ------------------------------------------------

    @property
    def channel_max(self) -> int:
        """``channel-max`` to offer in Connection.Tune (amqpSessionCountLimit)."""
        return self.amqpSessionCountLimit

    @property
    def frame_max(self) -> int:
        """``frame-max`` to offer in Connection.Tune (amqpNetworkBufferSize), in bytes."""
        return self.amqpNetworkBufferSize

    @property
    def heartbeat(self) -> int:
        """Heartbeat interval in seconds to offer in Connection.Tune (0: none)."""
        return self.amqpHeartbeatDelay

    def heartbeat_timeout_for(self, negotiated_heartbeat: int) -> float | None:
        """Seconds of silence after which a connection is dead; None when heartbeats are off."""
        if negotiated_heartbeat <= 0:
            return None
        return float(negotiated_heartbeat * self.amqpHeartbeatTimeoutFactor)

    @property
    def heartbeat_timeout(self) -> float | None:
        """:meth:`heartbeat_timeout_for` the offered interval (amqpHeartbeatDelay)."""
        return self.heartbeat_timeout_for(self.amqpHeartbeatDelay)

    @property
    def connection_close_timeout(self) -> float:
        """Seconds to wait for Connection.Close-Ok (amqpConnectionCloseTimeout is in ms)."""
        return self.amqpConnectionCloseTimeout / 1000.0

    @property
    def handshake_timeout(self) -> float:
        """Seconds a connection has to complete the handshake (amqpHandshakeTimeoutMs)."""
        return self.amqpHandshakeTimeoutMs / 1000.0

    @property
    def zookeeper_session_timeout(self) -> float:
        """ZooKeeper session timeout in seconds, as kazoo's ``timeout`` wants it."""
        return self.zooKeeperSessionTimeoutMs / 1000.0

    @property
    def node_name(self) -> str:
        """``amqpNodeName``, or ``rabbit@<host name>`` when it is empty."""
        return self.amqpNodeName or f"rabbit@{socket.gethostname()}"

    @property
    def tls_listeners(self) -> tuple[Listener, ...]:
        return tuple(listener for listener in self.amqpListeners if listener.tls)

    @property
    def broker_tls(self) -> bool:
        """Whether the connection to Pulsar uses TLS (the flag, or a pulsar+ssl:// URL)."""
        return self.tlsEnabledWithBroker or self.brokerServiceURL.startswith("pulsar+ssl:")

    @property
    def broker_client_auth_kind(self) -> str:
        """``"token"``, ``"tls"``, ``"basic"``, ``"oauth2"``, or ``""`` for none."""
        return _AUTH_PLUGINS[self.brokerClientAuthenticationPlugin]

    @property
    def effective_broker_client_authentication_parameters(self) -> str:
        """amqpBrokerClientAuthenticationParameters if set, else
        brokerClientAuthenticationParameters (reference/002)."""
        return (
            self.amqpBrokerClientAuthenticationParameters
            or self.brokerClientAuthenticationParameters
        )

    @property
    def advertised_host(self) -> str:
        """advertisedAddress, else the first listener's host, else this machine's name."""
        if self.advertisedAddress:
            return self.advertisedAddress
        host = self.amqpListeners[0].host if self.amqpListeners else ""
        if host in _WILDCARD_HOSTS:
            return socket.gethostname()
        return host

    def __repr__(self) -> str:
        # Secrets (passwords, HMAC keys, broker credentials) never reach logs through repr.
        parts = []
        for spec in _SCHEMA:
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


_SCHEMA: Final = _build_schema()
_BY_NAME: Final = {spec.name: spec for spec in _SCHEMA}


def describe_keys() -> tuple[ConfigKey, ...]:
    """Every configuration key, in documentation order (sections as in the reference)."""
    return _SCHEMA


# --------------------------------------------------------------------------------------------
# Value parsers: (spec, text) -> value, raising _Invalid(problem) on bad input
# --------------------------------------------------------------------------------------------

_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::"})
_INT_RE: Final = re.compile(r"[+-]?[0-9]+")
_HOST_LABEL_RE: Final = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?")
_PULSAR_NAME_RE: Final = re.compile(r"[a-zA-Z0-9_=:.-]+")
_CIPHER_RE: Final = re.compile(r"[A-Za-z0-9_.+-]+")

_MECHANISMS: Final = ("PLAIN", "AMQPLAIN", "EXTERNAL")

# TLS version names as Java spells them, and the ssl flag telling whether OpenSSL has them.
_TLS_VERSIONS: Final = {
    "TLSV1.3": ("TLSv1.3", "HAS_TLSv1_3"),
    "TLSV1.2": ("TLSv1.2", "HAS_TLSv1_2"),
    "TLSV1.1": ("TLSv1.1", "HAS_TLSv1_1"),
    "TLSV1": ("TLSv1", "HAS_TLSv1"),
}

_AUTH_PLUGINS: Final = {
    "": "",
    "org.apache.pulsar.client.impl.auth.AuthenticationToken": "token",
    "org.apache.pulsar.client.impl.auth.AuthenticationTls": "tls",
    "org.apache.pulsar.client.impl.auth.AuthenticationBasic": "basic",
    "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2": "oauth2",
    "token": "token",
    "tls": "tls",
    "basic": "basic",
    "oauth2": "oauth2",
}


def _got(spec: ConfigKey, text: str) -> str:
    return "" if spec.secret else f", got {_show(text)}"


def _parse_string(spec: ConfigKey, text: str) -> str:
    return text


def _parse_int(spec: ConfigKey, text: str) -> int:
    lo, hi = spec.minimum, spec.maximum
    if lo is not None and hi is not None:
        wanted = f"an integer from {lo} to {hi}"
    elif lo is not None:
        wanted = f"an integer >= {lo}"
    else:
        wanted = "an integer"
    if not _INT_RE.fullmatch(text) or len(text) > 30:
        raise _Invalid(f"must be {wanted}{_got(spec, text)}")
    value = int(text)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise _Invalid(f"must be {wanted}{_got(spec, text)}")
    return value


def _parse_bool(spec: ConfigKey, text: str) -> bool:
    lowered = text.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise _Invalid(f"must be true or false{_got(spec, text)}")


def _split_list(text: str) -> list[str]:
    """Comma-separated items, trimmed; empty items (``a,,b``, a trailing comma) are ignored."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _parse_string_list(spec: ConfigKey, text: str) -> tuple[str, ...]:
    return _dedupe(_split_list(text))


def _parse_seconds_list(spec: ConfigKey, text: str) -> tuple[int, ...]:
    values: list[int] = []
    for item in _split_list(text):
        if not (item.isascii() and item.isdigit()) or int(item) < 1:
            raise _Invalid(f"{_show(item)} is not a whole number of seconds >= 1")
        values.append(int(item))
    if not values:
        raise _Invalid("give at least one number of seconds")
    return tuple(sorted(set(values)))


def _check_host(host: str, what: str) -> str:
    """Validate a host name, IPv4 or IPv6 address (without brackets); return it."""
    if not host:
        raise _Invalid(f"{what} has no host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _Invalid(f"{what} has an invalid IPv6 address {_show(host)}") from None
        return host
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(
        len(label) <= 63 and _HOST_LABEL_RE.fullmatch(label) for label in labels
    ):
        raise _Invalid(f"{what} has an invalid host name {_show(host)}")
    return host


def _parse_port(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        raise _Invalid(f"{what} has an invalid port {_show(text)}")
    port = int(text)
    if not 1 <= port <= 65535:
        raise _Invalid(f"{what} has port {port}, outside 1..65535")
    return port


def _split_host_port(text: str, what: str, default_port: int) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise _Invalid(f"{what} has an unclosed '[' in {_show(text)}")
        host, rest = text[1:end], text[end + 1 :]
        if not host or ":" not in host:
            raise _Invalid(f"{what} has an invalid IPv6 address {_show(host)}")
        if rest and not rest.startswith(":"):
            raise _Invalid(f"{what} has unexpected text after ']' in {_show(text)}")
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise _Invalid(f"{what}: an IPv6 address must be written in brackets, e.g. [::1]:5672")
    elif ":" in text:
        host, port_text = text.split(":")
    else:
        host, port_text = text, None
    _check_host(host, what)
    port = default_port if port_text is None else _parse_port(port_text, what)
    return host, port


_URL_RE: Final = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)", re.DOTALL)


def _parse_listener(item: str) -> Listener:
    what = f"listener {_show(item)}"
    match = _URL_RE.fullmatch(item)
    if not match:
        raise _Invalid(f"{what} is not of the form amqp[s]://<host>:<port>")
    scheme = match["scheme"].lower()
    if scheme == UNIX_SCHEME:
        return _parse_unix_listener(match["rest"], what)
    if scheme not in ("amqp", "amqps"):
        raise _Invalid(
            f"{what} has scheme {_show(match['scheme'])}; use amqp:// or amqps:// (or amqp+unix:///path)"
        )
    hostport = match["rest"]
    if hostport.endswith("/"):
        hostport = hostport[:-1]
    if any(c in hostport for c in "/?#@"):
        raise _Invalid(f"{what} must be only amqp[s]://<host>:<port> (no path, user or query)")
    host, port = _split_host_port(hostport, what, 5671 if scheme == "amqps" else 5672)
    return Listener(scheme=scheme, host=host, port=port)


# Linux's sun_path is 108 bytes including the terminating NUL.
_UNIX_PATH_MAX: Final = 107


def _parse_unix_listener(path: str, what: str) -> Listener:
    """``amqp+unix:///absolute/path``: what follows ``//`` is the absolute path."""
    if not path.startswith("/") or path == "/":
        raise _Invalid(f"{what} must be amqp+unix:///<absolute path of the socket file>")
    if path.endswith("/") or "\x00" in path or any(c.isspace() for c in path):
        raise _Invalid(f"{what} has an invalid socket path {_show(path)}")
    if len(os.fsencode(path)) > _UNIX_PATH_MAX:
        raise _Invalid(f"{what}: the socket path is longer than {_UNIX_PATH_MAX} bytes")
    return Listener(scheme=UNIX_SCHEME, host="", port=0, path=path)


def _parse_listeners(spec: ConfigKey, text: str) -> tuple[Listener, ...]:
    items = _split_list(text)
    if not items:
        raise _Invalid("must list at least one amqp:// or amqps:// listener")
    listeners: list[Listener] = []
    seen: dict[tuple[str, int, str], Listener] = {}
    for item in items:
        listener = _parse_listener(item)
        address = (listener.host, listener.port, listener.path)
        previous = seen.get(address)
        if previous is not None:
            raise _Invalid(f"listeners {previous.url} and {listener.url} use the same address")
        seen[address] = listener
        listeners.append(listener)
    return tuple(listeners)


def _parse_networks(spec: ConfigKey, text: str) -> tuple[str, ...]:
    """CIDR networks in their canonical form (``10.1.2.3/8`` is refused: host bits set), and
    ``unix``."""
    result = []
    for item in _split_list(text):
        if item.lower() == UNIX_PEERS:
            result.append(UNIX_PEERS)
            continue
        try:
            network = ipaddress.ip_network(item, strict=True)
        except ValueError as error:
            raise _Invalid(
                f"{_show(item)} is not a CIDR network such as 10.0.0.0/8 or 127.0.0.1/32, "
                f"nor unix ({error})"
            ) from None
        result.append(str(network))
    return _dedupe(result)


def _parse_mechanisms(spec: ConfigKey, text: str) -> tuple[str, ...]:
    items = _split_list(text)
    if not items:
        raise _Invalid(f"must list at least one of {', '.join(_MECHANISMS)}")
    result = []
    for item in items:
        name = item.upper()
        if name not in _MECHANISMS:
            raise _Invalid(f"unknown mechanism {_show(item)}; supported: {', '.join(_MECHANISMS)}")
        result.append(name)
    return _dedupe(result)


def _parse_tls_protocols(spec: ConfigKey, text: str) -> tuple[str, ...]:
    result = []
    for item in _split_list(text):
        known = _TLS_VERSIONS.get(item.upper())
        if known is None:
            supported = [name for name, flag in _TLS_VERSIONS.values() if getattr(ssl, flag)]
            raise _Invalid(
                f"unsupported TLS protocol {_show(item)}; supported: {', '.join(supported)}"
            )
        name, flag = known
        if not getattr(ssl, flag):
            raise _Invalid(f"{name} is not supported by this Python's ssl module (OpenSSL)")
        result.append(name)
    return _dedupe(result)


def _parse_tls_ciphers(spec: ConfigKey, text: str) -> tuple[str, ...]:
    items = _split_list(text)
    for item in items:
        if not _CIPHER_RE.fullmatch(item):
            raise _Invalid(f"invalid cipher suite name {_show(item)}")
    return _dedupe(items)


def _parse_store_type(spec: ConfigKey, text: str) -> str:
    upper = text.upper()
    if upper in ("PKCS12", ""):
        # Empty means the default; Java's KeyStore type names are case-insensitive.
        return "PKCS12"
    if upper == "JKS":
        raise _Invalid(
            "JKS key stores cannot be read from Python; convert the store to PKCS12 with "
            "'keytool -importkeystore -srckeystore store.jks -destkeystore store.p12 "
            "-deststoretype PKCS12' and set this key to PKCS12"
        )
    raise _Invalid(f"unsupported key store type {_show(text)}; only PKCS12 is supported")


def _parse_tls_provider(spec: ConfigKey, text: str) -> str:
    canonical = {"": "", "JDK": "JDK", "OPENSSL": "OpenSSL"}.get(text.upper())
    if canonical is None:
        raise _Invalid(
            f"{_show(text)} is a Java security provider; the Python gateway always uses the "
            "OpenSSL library of Python's ssl module (accepted: empty, JDK, OpenSSL)"
        )
    return canonical


_DATA_URL_RE: Final = re.compile(r"data:[^,;]*;base64,(?P<data>.*)", re.DOTALL)


def _parse_token_key(spec: ConfigKey, text: str) -> str:
    if not text:
        return text
    forms = "use data:;base64,<base64 key> or file:///absolute/path/to/key"
    if text.startswith("data:"):
        match = _DATA_URL_RE.fullmatch(text)
        if not match:
            raise _Invalid(f"a data: URL must be base64-encoded; {forms}")
        try:
            decoded = base64.b64decode(match["data"], validate=True)
        except (binascii.Error, ValueError):
            raise _Invalid(f"the data: URL does not hold valid base64; {forms}") from None
        if not decoded:
            raise _Invalid(f"the data: URL holds an empty key; {forms}")
        return text
    if text.startswith("file:"):
        if not text.startswith("file:///") or len(text) == len("file:///"):
            raise _Invalid(f"a file URL must be file:///<absolute path>{_got(spec, text)}")
        return text
    raise _Invalid(f"unsupported key form{_got(spec, text)}; {forms}")


def _parse_service_hosts(spec: ConfigKey, text: str, schemes: dict[str, int]) -> str:
    """``scheme://host[:port][,host[:port]...][/path]``, returned with a lower-case scheme."""
    wanted = " or ".join(f"{scheme}://" for scheme in schemes)
    match = _URL_RE.fullmatch(text)
    if not match:
        raise _Invalid(f"must be a {wanted} URL{_got(spec, text)}")
    scheme = match["scheme"].lower()
    if scheme not in schemes:
        raise _Invalid(f"must be a {wanted} URL, not {_show(match['scheme'] + '://')}")
    hosts = match["rest"].partition("/")[0]
    if any(c in match["rest"] for c in "?#@") or any(c.isspace() for c in match["rest"]):
        raise _Invalid(f"must be {wanted}host:port (no user, query or spaces){_got(spec, text)}")
    if not hosts.strip(","):
        raise _Invalid(f"has no host{_got(spec, text)}")
    for hostport in hosts.split(","):
        _split_host_port(hostport, f"address {_show(hostport)}", schemes[scheme])
    # Schemes are case-insensitive (RFC 3986); hand the clients the lower-case form.
    return f"{scheme}://{match['rest']}"


def _parse_pulsar_url(spec: ConfigKey, text: str) -> str:
    url = _parse_service_hosts(spec, text, {"pulsar": 6650, "pulsar+ssl": 6651})
    if "/" in url.split("://", 1)[1].rstrip("/"):
        raise _Invalid(f"a pulsar:// URL has no path{_got(spec, text)}")
    return url


def _parse_web_url(spec: ConfigKey, text: str) -> str:
    return _parse_service_hosts(spec, text, {"http": 80, "https": 443})


def _parse_zookeeper(spec: ConfigKey, text: str) -> str:
    servers = text
    if servers.startswith("zk:"):
        servers = servers[3:]
        if servers.startswith("//"):
            servers = servers[2:]
    elif _URL_RE.fullmatch(servers) or re.match(r"(etcd|rocksdb|memory|metadata-store):", text):
        raise _Invalid(
            f"only a ZooKeeper connection string (host:port,...) is supported{_got(spec, text)}"
        )
    hosts, slash, chroot = servers.partition("/")
    if slash and (not chroot or chroot.endswith("/") or "//" in chroot):
        raise _Invalid(f"invalid chroot path {_show('/' + chroot)}")
    if any(c.isspace() for c in servers):
        raise _Invalid(f"must not contain spaces{_got(spec, text)}")
    if not hosts.strip(","):
        raise _Invalid(f"has no host{_got(spec, text)}")
    for hostport in _split_list(hosts):
        _split_host_port(hostport, f"server {_show(hostport)}", 2181)
    return servers


def _parse_pulsar_name(spec: ConfigKey, text: str) -> str:
    if not _PULSAR_NAME_RE.fullmatch(text):
        raise _Invalid(
            "must be a non-empty Pulsar name (letters, digits and _ - = : .)" + _got(spec, text)
        )
    return text


def _parse_host(spec: ConfigKey, text: str) -> str:
    if text.startswith("[") and text.endswith("]"):
        host = text[1:-1]
        if ":" not in host:
            raise _Invalid(f"the address has an invalid IPv6 address {_show(host)}")
        _check_host(host, "the address")
    elif text:
        _check_host(text, "the address")
    return text


def _parse_auth_plugin(spec: ConfigKey, text: str) -> str:
    if text not in _AUTH_PLUGINS:
        raise _Invalid(
            f"unsupported plugin {_show(text)}; supported: AuthenticationToken, "
            "AuthenticationTls, AuthenticationBasic, AuthenticationOAuth2 (full Java class "
            "names) or token, tls, basic, oauth2"
        )
    return text


def _parse_metrics_url(spec: ConfigKey, text: str) -> MetricsListener | None:
    if not text:
        return None
    what = f"{_show(text)}"
    match = _URL_RE.fullmatch(text)
    if not match or match["scheme"].lower() != "http":
        raise _Invalid(f"{what} is not of the form http://<host>:<port> (or empty to disable)")
    hostport = match["rest"].rstrip("/")
    if any(c in hostport for c in "/?#@"):
        raise _Invalid(f"{what} must be only http://<host>:<port> (no path, user or query)")
    # Port 0 is allowed here (a free port), unlike the AMQP listeners.
    if hostport.endswith(":0"):
        host, _ = _split_host_port(hostport[:-2], what, 15692)
        return MetricsListener(host, 0)
    host, port = _split_host_port(hostport, what, 15692)
    return MetricsListener(host, port)


_TOPIC_RE: Final = re.compile(r"persistent://([^/\s]+)/([^/\s]+)/([^/\s]+)")


def _parse_topic(spec: ConfigKey, text: str) -> str:
    match = _TOPIC_RE.fullmatch(text)
    if not match or not all(_PULSAR_NAME_RE.fullmatch(part) for part in match.groups()):
        raise _Invalid(
            "must be persistent://<tenant>/<namespace>/<topic> (Pulsar names: letters, digits "
            "and _ - = : .)" + _got(spec, text)
        )
    return text


_PARSERS: Final[dict[Kind, Callable[[ConfigKey, str], Any]]] = {
    Kind.STRING: _parse_string,
    Kind.HOST: _parse_host,
    Kind.PULSAR_NAME: _parse_pulsar_name,
    Kind.INT: _parse_int,
    Kind.BOOL: _parse_bool,
    Kind.STRING_LIST: _parse_string_list,
    Kind.LISTENERS: _parse_listeners,
    Kind.NETWORKS: _parse_networks,
    Kind.MECHANISMS: _parse_mechanisms,
    Kind.TLS_PROTOCOLS: _parse_tls_protocols,
    Kind.TLS_CIPHERS: _parse_tls_ciphers,
    Kind.STORE_TYPE: _parse_store_type,
    Kind.TLS_PROVIDER: _parse_tls_provider,
    Kind.TOKEN_KEY: _parse_token_key,
    Kind.PULSAR_URL: _parse_pulsar_url,
    Kind.WEB_URL: _parse_web_url,
    Kind.ZOOKEEPER: _parse_zookeeper,
    Kind.AUTH_PLUGIN: _parse_auth_plugin,
    Kind.SECONDS_LIST: _parse_seconds_list,
    Kind.METRICS_URL: _parse_metrics_url,
    Kind.TOPIC: _parse_topic,
}


# --------------------------------------------------------------------------------------------
# The file format and the environment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Raw:
    value: str
    where: str  # "path:line", "environment variable STARLIGHT_x" or "default"
    line: int = 0


def _unknown_key(key: str, where: str, *, prefix: str = "") -> ConfigError:
    """'unknown key' with a suggestion; *prefix* is prepended to suggested names (env vars)."""
    names = list(_BY_NAME)
    hint = ""
    folded = {name.lower(): name for name in names}
    if key.lower() in folded:
        hint = f"; did you mean {prefix}{folded[key.lower()]}? (keys are case-sensitive)"
    else:
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
        if close:
            hint = f"; did you mean {prefix}{close[0]}?"
    return ConfigError(f"{where}: unknown key {_show(key)}{hint}", key=prefix + key)


_LINE_BREAK_RE: Final = re.compile(r"\r\n|\r|\n")


def _parse_properties(text: str, source: str) -> dict[str, _Raw]:
    """Java-properties style ``key=value`` lines (see docs/configuration.md for the subset)."""
    text = text.removeprefix("\ufeff")
    lines = _LINE_BREAK_RE.split(text)
    entries: dict[str, _Raw] = {}
    index = 0
    while index < len(lines):
        number = index + 1
        logical = lines[index].strip()
        index += 1
        if not logical or logical[0] in "#!":
            continue
        # A line ending in an odd number of backslashes continues on the next one (Java rule).
        while (len(logical) - len(logical.rstrip("\\"))) % 2 == 1:
            logical = logical[:-1]
            if index >= len(lines):
                break
            logical += lines[index].strip()
            index += 1
        where = f"{source}:{number}"
        key, equals, value = logical.partition("=")
        key, value = key.strip(), value.strip()
        if not equals:
            raise ConfigError(f"{where}: expected key=value, found no '=' on this line")
        if not key:
            raise ConfigError(f"{where}: expected key=value, found no key before '='")
        if key not in _BY_NAME:
            raise _unknown_key(key, where)
        previous = entries.get(key)
        if previous is not None:
            raise ConfigError(
                f"{where}: duplicate key {key} (already set on line {previous.line}); "
                "set each key once",
                key=key,
            )
        entries[key] = _Raw(value, where, number)
    return entries


def _environment_overrides(environ: Mapping[str, str]) -> dict[str, _Raw]:
    entries: dict[str, _Raw] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        key = variable[len(ENV_PREFIX) :]
        where = f"environment variable {variable}"
        if key not in _BY_NAME:
            raise _unknown_key(key, where, prefix=ENV_PREFIX)
        entries[key] = _Raw(environ[variable].strip(), where)
    return entries


def _read_file(path: str | os.PathLike[str]) -> str:
    shown = os.fsdecode(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise ConfigError(f"{shown}: cannot read configuration file: {reason}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ConfigError(f"{shown}:{line}: configuration file is not valid UTF-8") from None


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_config(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> GatewayConfig:
    """Read the configuration file at *path* (None: no file), apply ``STARLIGHT_<key>``
    variables from *environ* (None: ``os.environ``), validate, and return the configuration.

    Raises ConfigError, with a one-line message, for anything wrong.
    """
    text = _read_file(path) if path is not None else ""
    source = os.fsdecode(path) if path is not None else "<no file>"
    return config_from_text(text, environ, source=source)


def config_from_text(
    text: str, environ: Mapping[str, str] | None = None, *, source: str = "<string>"
) -> GatewayConfig:
    """Like :func:`load_config` for the contents of a file; *source* names it in errors."""
    entries = _parse_properties(text, source)
    entries.update(_environment_overrides(os.environ if environ is None else environ))

    missing = [
        spec.name
        for spec in _SCHEMA
        if spec.required and (spec.name not in entries or not entries[spec.name].value)
    ]
    if missing:
        where = "" if source.startswith("<") else f" in {source}"
        raise ConfigError(
            f"missing required key{'s' if len(missing) > 1 else ''} {', '.join(missing)}: "
            f"set {'them' if len(missing) > 1 else 'it'}{where} or with "
            f"{ENV_PREFIX}{missing[0]}=...",
            key=missing[0],
        )

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in _SCHEMA:
        raw = entries.get(spec.name) or _Raw(spec.default, "default")
        try:
            values[spec.name] = _PARSERS[spec.kind](spec, raw.value)
        except _Invalid as problem:
            raise ConfigError(f"{raw.where}: {spec.name}: {problem}", key=spec.name) from None
        sources[spec.name] = raw.where
    config = GatewayConfig(**values)
    _check_cross_key(config, sources)
    return config


def _check_cross_key(config: GatewayConfig, sources: Mapping[str, str]) -> None:
    """Rules that involve several keys. Each error names the key it is reported on first."""

    def fail(key: str, problem: str) -> ConfigError:
        where = sources.get(key, "default")
        prefix = "" if where == "default" else f"{where}: "
        return ConfigError(f"{prefix}{key}: {problem}", key=key)

    c = config
    if c.tlsEnabledWithKeyStore and not c.tlsKeyStore:
        raise fail("tlsEnabledWithKeyStore", "is true but tlsKeyStore is empty")
    if c.brokerClientTlsEnabledWithKeyStore and not c.brokerClientTlsTrustStore:
        raise fail(
            "brokerClientTlsEnabledWithKeyStore", "is true but brokerClientTlsTrustStore is empty"
        )

    has_pem_cert = bool(c.tlsCertificateFilePath and c.tlsKeyFilePath)
    for listener in c.tls_listeners:
        if not (has_pem_cert or c.tlsEnabledWithKeyStore):
            raise fail(
                "amqpListeners",
                f"listener {listener.url} needs a certificate: set tlsCertificateFilePath and "
                "tlsKeyFilePath, or tlsEnabledWithKeyStore=true and tlsKeyStore",
            )
    server_trust = bool(c.tlsTrustCertsFilePath or (c.tlsEnabledWithKeyStore and c.tlsTrustStore))
    if "EXTERNAL" in c.amqpAuthenticationMechanisms:
        if not c.tls_listeners:
            raise fail(
                "amqpAuthenticationMechanisms",
                "EXTERNAL needs an amqps:// listener in amqpListeners (it authenticates with "
                "the TLS client certificate)",
            )
        if not server_trust:
            raise fail(
                "amqpAuthenticationMechanisms",
                "EXTERNAL needs trusted CAs to verify client certificates: set "
                "tlsTrustCertsFilePath, or tlsEnabledWithKeyStore=true and tlsTrustStore",
            )
    if c.tlsRequireTrustedClientCertOnConnect and not server_trust:
        raise fail(
            "tlsRequireTrustedClientCertOnConnect",
            "is true but no trusted CAs are configured: set tlsTrustCertsFilePath, or "
            "tlsEnabledWithKeyStore=true and tlsTrustStore",
        )

    if c.tokenSecretKey and c.tokenPublicKey:
        raise fail("tokenSecretKey", "set only one of tokenSecretKey and tokenPublicKey")
    token_mechanisms = [m for m in c.amqpAuthenticationMechanisms if m in ("PLAIN", "AMQPLAIN")]
    if c.authenticationEnabled and token_mechanisms and not (c.tokenSecretKey or c.tokenPublicKey):
        raise fail(
            "authenticationEnabled",
            f"is true and amqpAuthenticationMechanisms offers {token_mechanisms[0]}, which "
            "validates JWTs: set tokenSecretKey or tokenPublicKey",
        )
    if c.tokenAudienceClaim and not c.tokenAudience:
        raise fail("tokenAudienceClaim", "is set but tokenAudience is empty")
    if c.authorizationEnabled and not c.authenticationEnabled:
        raise fail("authorizationEnabled", "is true but authenticationEnabled is false")

    if c.tlsEnabledWithBroker:
        if not c.brokerServiceURL.startswith("pulsar+ssl://"):
            raise fail(
                "brokerServiceURL", "must be a pulsar+ssl:// URL when tlsEnabledWithBroker=true"
            )
        if not c.brokerWebServiceURL.startswith("https://"):
            raise fail(
                "brokerWebServiceURL", "must be an https:// URL when tlsEnabledWithBroker=true"
            )
    if c.brokerClientAuthenticationPlugin:
        if not c.effective_broker_client_authentication_parameters:
            raise fail(
                "brokerClientAuthenticationPlugin",
                "is set but brokerClientAuthenticationParameters (or "
                "amqpBrokerClientAuthenticationParameters) is empty",
            )
    elif c.brokerClientAuthenticationParameters or c.amqpBrokerClientAuthenticationParameters:
        key = (
            "amqpBrokerClientAuthenticationParameters"
            if c.amqpBrokerClientAuthenticationParameters
            else "brokerClientAuthenticationParameters"
        )
        raise fail(key, "is set but brokerClientAuthenticationPlugin is empty")


# --------------------------------------------------------------------------------------------
# Generators: the README table and conf/gateway.conf
# --------------------------------------------------------------------------------------------

#: Values set (not commented out) in conf/gateway.conf: the local stack of scripts/.
EXAMPLE_VALUES: Final = {
    "configurationStoreServers": "127.0.0.1:2181",
    "amqpListeners": "amqp://127.0.0.1:5672",
    "brokerServiceURL": "pulsar://127.0.0.1:6650",
    "brokerWebServiceURL": "http://127.0.0.1:8080",
}


def _markdown_default(spec: ConfigKey) -> str:
    if spec.required:
        return "**required**"
    if spec.default == "":
        return "*(empty)*"
    return f"`{spec.default}`"


def render_markdown_table() -> str:
    """The Markdown configuration tables (one per section), for the README and the docs."""
    out: list[str] = []
    for section in Section:
        specs = [spec for spec in _SCHEMA if spec.section is section]
        if out:
            out.append("")
        out.append(f"**{section.value}**")
        out.append("")
        out.append("| Key | Default | Description |")
        out.append("| --- | --- | --- |")
        for spec in specs:
            description = spec.description
            if spec.kind is Kind.INT:
                description += f" Range: {spec.type.removeprefix('integer ')}."
            out.append(f"| `{spec.name}` | {_markdown_default(spec)} | {description} |")
    return "\n".join(out) + "\n"


def render_example_conf() -> str:
    """``conf/gateway.conf``: every key, commented, set only for the local stack."""
    wrap = textwrap.TextWrapper(
        width=98, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
    )
    out = [
        "# Starlight for RabbitMQ (Python) - gateway configuration.",
        "#",
        "# Generated by `scripts/config_table.py --conf`; docs/configuration.md explains the",
        "# format. One key=value per line; lines starting with # or ! are comments. Every key",
        "# is listed: a commented-out key (#key=value) shows its default. An environment",
        "# variable STARLIGHT_<key> (e.g. STARLIGHT_amqpListeners) overrides this file.",
        "# The values set below suit the local stack started by scripts/ (make run).",
    ]
    for section in Section:
        out += ["", "#" * 98, f"# {section.value}", "#" * 98]
        for spec in (s for s in _SCHEMA if s.section is section):
            out.append("")
            out.extend(wrap.wrap(spec.description))
            if spec.required:
                out.append(f"# Type: {spec.type}. Required.")
            else:
                shown = spec.default if spec.default else "(empty)"
                out.append(f"# Type: {spec.type}. Default: {shown}")
            if spec.name in EXAMPLE_VALUES:
                out.append(f"{spec.name}={EXAMPLE_VALUES[spec.name]}")
            else:
                out.append(f"#{spec.name}={spec.default}")
    return "\n".join(out) + "\n"
