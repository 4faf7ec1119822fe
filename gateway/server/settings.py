"""What the trio shell needs to know, independent of how the configuration file names it."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from gateway.amqp.connection import ConnectionSettings
from gateway.auth.tls_context import TlsSettings
from gateway.config.address import Listener, ip_address_of

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ProxyTrust:
    """Who may open a connection with a PROXY protocol v2 header (amqpProxyProtocolTrustedNetworks).

    A trusted peer must send one; anyone else's is refused by the protocol core."""

    networks: tuple[IPNetwork, ...] = ()
    #: The peers of amqp+unix listeners.
    unix: bool = False

    @classmethod
    def parse(cls, entries: tuple[str, ...]) -> ProxyTrust:
        """From the configuration's canonical entries (CIDRs and ``unix``)."""
        return cls(
            networks=tuple(ipaddress.ip_network(entry) for entry in entries if entry != "unix"),
            unix="unix" in entries,
        )

    def trusts(self, peer_host: str | None) -> bool:
        """``peer_host``: the peer's IP address as the socket gives it; None on a Unix socket."""
        if peer_host is None:
            return self.unix
        if not self.networks:
            return False
        address = ip_address_of(peer_host)
        return address is not None and any(address in network for network in self.networks)


@dataclass(frozen=True)
class ServerSettings:
    listeners: tuple[Listener, ...] = (Listener("amqp", "127.0.0.1", 5672),)
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    # amqpConnectionCloseTimeout: how long a Connection.Close waits for Close-Ok, and how long
    # the socket stays open after our Close-Ok for the client to close it.
    close_timeout: float = 2.0
    # A client that has not finished the handshake by then is dropped (slow-loris defence);
    # on amqps listeners the TLS handshake counts too.
    handshake_timeout: float = 10.0
    # The amqps listeners' certificate, trusted CAs, versions and ciphers; None: no amqps.
    tls: TlsSettings | None = None
    # Refusing the third and later failed logins from one address within a minute waits
    # 0.25 s, doubling up to this many seconds (0: never wait); see gateway/auth/throttle.py.
    login_failure_max_delay: float = 2.0
    # amqpDebugBinaryDataLength: how much of each frame the debug log shows.
    debug_binary_length: int = 80
    # Peers that must (and alone may) start with a PROXY protocol v2 header.
    proxy_trust: ProxyTrust = field(default_factory=ProxyTrust)
    # Outgoing chunks queued per connection before the reader stops reading (back-pressure).
    write_queue_depth: int = 64
