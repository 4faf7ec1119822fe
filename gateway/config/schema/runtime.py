"""Gateway-specific keys: the process (compiled modules, allocator), PROXY protocol,
ZooKeeper session."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import Kind, Section, key_metadata
from gateway.config.schema.observability import ObservabilityKeys

# Every key of this module is in one section of the documentation.
_GW = Section.GATEWAY


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class RuntimeKeys(ObservabilityKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    gatewayCompiledHotPath: bool = field(
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
            Kind.INT,
            "30000",
            """ZooKeeper session timeout in milliseconds for the metadata store: how long the
            ephemeral znodes of a gateway that died outlive it.""",
            _GW,
            ours=True,
            minimum=1000,
        )
    )
