"""What the trio shell needs to know, independent of how the configuration file names it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.amqp.connection import ConnectionSettings
from gateway.auth.tls_context import TlsSettings


@dataclass(frozen=True)
class ListenAddress:
    scheme: str  # "amqp" or "amqps"
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class ServerSettings:
    listeners: tuple[ListenAddress, ...] = (ListenAddress("amqp", "127.0.0.1", 5672),)
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    # amqpConnectionCloseTimeout: how long a Connection.Close waits for Close-Ok.
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
    # Outgoing chunks queued per connection before the reader stops reading (back-pressure).
    write_queue_depth: int = 64
