"""Values the gateway derives from the keys (snake_case, as opposed to the camelCase keys).

A mixin of :class:`~gateway.config.schema.GatewayConfig`, so that the server reads them from the
configuration instead of working them out again; the annotations below only declare, for the
type checker, the keys these properties read (the fields themselves live in the schema).
"""

from __future__ import annotations

import socket

from gateway.config.address import Listener
from gateway.config.keys import MetricsListener
from gateway.config.values import AUTH_PLUGINS, WILDCARD_HOSTS


class DerivedValues:
    """The snake_case properties of :class:`~gateway.config.schema.GatewayConfig`."""

    # No instance dictionary: GatewayConfig is a slotted dataclass.
    __slots__ = ()

    # The keys read below; declared here for the type checker, defined by the schema's fields
    # (mypy rejects a field whose type drifts from these).
    advertisedAddress: str
    amqpAuthenticationMechanisms: tuple[str, ...]
    amqpBrokerClientAuthenticationParameters: str
    amqpConnectionCloseTimeout: int
    amqpHandshakeTimeoutMs: int
    amqpHeartbeatDelay: int
    amqpHeartbeatTimeoutFactor: int
    amqpListeners: tuple[Listener, ...]
    amqpNetworkBufferSize: int
    amqpNodeName: str
    amqpSessionCountLimit: int
    authenticationEnabled: bool
    brokerClientAuthenticationParameters: str
    brokerClientAuthenticationPlugin: str
    brokerServiceURL: str
    managementListener: MetricsListener | None
    tlsEnabledWithBroker: bool
    zooKeeperSessionTimeoutMs: int

    @property
    def channel_max(self) -> int:
        """``channel-max`` to offer in Connection.Tune (amqpSessionCountLimit)."""
        return self.amqpSessionCountLimit

    @property
    def offered_mechanisms(self) -> tuple[str, ...]:
        """SASL mechanisms to offer in Connection.Start: amqpAuthenticationMechanisms, and
        with authentication off AMQPLAIN right after PLAIN.

        AMQPLAIN carries PLAIN's credentials in a field table, and RabbitMQ offers both by
        default (``auth_mechanisms``); some clients log in with AMQPLAIN only (py-amqp prefers
        it, it is php-amqplib's default). The key's default stays the reference's (PLAIN);
        without authentication the credentials are not checked (the reference's gateway then
        does not even look at the mechanism), so offering AMQPLAIN too only lets those clients
        in. With authentication on, exactly the configured mechanisms are offered.
        """
        mechanisms = self.amqpAuthenticationMechanisms
        if self.authenticationEnabled or "AMQPLAIN" in mechanisms or "PLAIN" not in mechanisms:
            return mechanisms
        at = mechanisms.index("PLAIN") + 1
        return (*mechanisms[:at], "AMQPLAIN", *mechanisms[at:])

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
    def open_remote_listeners(self) -> tuple[Listener | MetricsListener, ...]:
        """The AMQP listeners, and the management API's, that other machines reach while any
        credentials are accepted (authenticationEnabled=false): what
        amqpAllowUnauthenticatedRemote must allow (the management API then makes anyone an
        administrator)."""
        if self.authenticationEnabled:
            return ()
        management = self.managementListener
        listeners = (*self.amqpListeners, *(() if management is None else (management,)))
        return tuple(listener for listener in listeners if not listener.local)

    @property
    def broker_tls(self) -> bool:
        """Whether the connection to Pulsar uses TLS (the flag, or a pulsar+ssl:// URL)."""
        return self.tlsEnabledWithBroker or self.brokerServiceURL.startswith("pulsar+ssl:")

    @property
    def broker_client_auth_kind(self) -> str:
        """``"token"``, ``"tls"``, ``"basic"``, ``"oauth2"``, or ``""`` for none."""
        return AUTH_PLUGINS[self.brokerClientAuthenticationPlugin]

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
        if host in WILDCARD_HOSTS:
            return socket.gethostname()
        return host
