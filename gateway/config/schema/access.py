"""Gateway-specific keys: vhosts and queues created on demand, who may connect and use what."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import Kind, Section, key_metadata
from gateway.config.schema.rollup import RollupKeys

# Every key of this module is in one section of the documentation.
_GW = Section.GATEWAY


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class AccessKeys(RollupKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    amqpAutoCreateVhosts: bool = field(
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
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
        metadata=key_metadata(
            Kind.STRING_LIST,
            "",
            "Roles allowed everything when authorizationEnabled is true, comma-separated.",
            _GW,
            ours=True,
        )
    )
    amqpHandshakeTimeoutMs: int = field(
        metadata=key_metadata(
            Kind.INT,
            "10000",
            """Milliseconds a new connection has to complete the AMQP handshake (protocol
            header to Connection.Open-Ok); a connection that takes longer is closed.""",
            _GW,
            ours=True,
            minimum=1,
        )
    )
