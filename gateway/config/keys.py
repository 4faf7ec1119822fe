"""What a configuration key is: its section, how its value is parsed, its documentation.

:class:`ConfigKey` is attached to each field of :class:`~gateway.config.schema.GatewayConfig`
(through :func:`key_metadata`), so that the loader and the generated documents share one list.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from gateway.config.address import loopback_host

#: Environment variables ``STARLIGHT_<key>`` (key spelled exactly as in the file) override it.
ENV_PREFIX: Final = "STARLIGHT_"

#: AMQP 0-9-1 ``frame-min-size`` (spec 4.2.3): no peer may be offered a smaller frame-max.
AMQP_FRAME_MIN_SIZE: Final = 4096

#: The largest AMQP long (unsigned 32 bits), the bound of keys sent in Connection.Tune.
MAX_UINT32: Final = 2**32 - 1


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
    MANAGEMENT_URL = "http:// or https://<host>:<port> URL, or empty"
    TOPIC = "Pulsar topic name"
    ALLOCATOR = "auto, jemalloc or system"
    RABBITMQ_VERSION = "RabbitMQ version (major.minor[.patch])"


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


def key_metadata(
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


#: The note of every key store key: which formats Python reads.
PKCS12_ONLY: Final = (
    "Only PKCS12: Java's JKS format cannot be read from Python (convert it with "
    "`keytool -importkeystore -deststoretype PKCS12`). The reference's Java default is JKS."
)


#: In amqpProxyProtocolTrustedNetworks: the peers of amqp+unix listeners.
UNIX_PEERS: Final = "unix"

#: The values of gatewayMemoryAllocator (gateway/allocator.py).
ALLOCATORS: Final = ("auto", "jemalloc", "system")


@dataclass(frozen=True, slots=True)
class MetricsListener:
    """``metricsListener``: where /metrics, /healthz and /readyz are served (and
    ``managementListener``: where the management API is)."""

    host: str  # without IPv6 brackets
    port: int  # 0: a free port
    # "https" only for managementListener (the AMQP listeners' certificate).
    scheme: str = "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def local(self) -> bool:
        """Whether only this machine reaches it (a loopback address, or ``localhost``), as
        for AMQP listeners (gateway/server/address.py ``Listener.local``)."""
        return loopback_host(self.host)

    def __str__(self) -> str:
        return self.url
