"""General and AMQP keys (reference/002, first table): the metadata store, the listeners,
what Connection.Tune offers."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.address import Listener
from gateway.config.derived import DerivedValues
from gateway.config.keys import AMQP_FRAME_MIN_SIZE, MAX_UINT32, Kind, Section, key_metadata

# Every key of this module is in one section of the documentation.
_A = Section.AMQP


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class AmqpKeys(DerivedValues):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- General and AMQP (reference/002, first table) ----------------------------------
    configurationStoreServers: str = field(
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
            Kind.HOST,
            "",
            """Host name or IP address of this gateway as seen by clients and by the other
            replicas. Empty: the host of the first listener, or the machine's host name when
            that listener binds a wildcard address. (In the reference's examples only.)""",
            _A,
        )
    )
    amqpSessionCountLimit: int = field(
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
            Kind.INT,
            "2",
            """A connection is considered broken when nothing has been received from the peer
            for the negotiated heartbeat interval times this factor.""",
            _A,
            minimum=1,
        )
    )
    amqpNetworkBufferSize: int = field(
        metadata=key_metadata(
            Kind.INT,
            "2097152",
            """Network buffer size in bytes (2 MB); also the largest frame accepted, offered as
            frame-max in Connection.Tune. At least 4096, AMQP's frame-min-size.""",
            _A,
            minimum=AMQP_FRAME_MIN_SIZE,
            maximum=MAX_UINT32,
        )
    )
    amqpMaxMessageSize: int = field(
        metadata=key_metadata(
            Kind.INT,
            "104857600",
            "Largest message body in bytes (100 MB) accepted from a publisher.",
            _A,
            minimum=1,
        )
    )
    amqpDebugBinaryDataLength: int = field(
        metadata=key_metadata(
            Kind.INT,
            "80",
            "How many bytes of binary data (bodies, frames) are written to debug logs.",
            _A,
            minimum=0,
        )
    )
    amqpConnectionCloseTimeout: int = field(
        metadata=key_metadata(
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
        metadata=key_metadata(
            Kind.BOOL,
            "true",
            """Whether the Pulsar producers of the gateway batch messages: the messages a
            channel hands a queue's topic together become one Pulsar entry. Cheaper
            publishing and consuming, but a consumer is sent a whole batch at once, and on a
            broker without batch-index acknowledgements (acknowledgmentAtBatchIndexLevelEnabled,
            Pulsar's default: off) a requeued message of a batch goes back by copy
            (docs/compatibility.md, "Settlement").""",
            _A,
        )
    )
