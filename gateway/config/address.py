"""Where the shell listens: one type from the ``amqpListeners`` key to the bound socket.

It belongs to the configuration, which parses ``amqpListeners`` into it; the shell binds it
(``gateway/server/address.py`` re-exports it under the shell's name). Standard library only.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

#: The scheme of a listener on a Unix domain socket: ``amqp+unix:///absolute/path.sock``.
UNIX_SCHEME: Final = "amqp+unix"


def loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost`` or a loopback address
    (``127.0.0.0/8``, ``::1``, an IPv4-mapped loopback). Any other name is not resolved."""
    if host.lower() == "localhost":
        return True
    address = ip_address_of(host)
    return address is not None and address.is_loopback


def ip_address_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address (an IPv6 zone dropped, an IPv4-mapped IPv6 address as the
    IPv4 one: an IPv4 client on a dual-stack socket); None if it is not one."""
    try:
        address = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True, slots=True)
class Listener:
    """One listening address: an entry of ``amqpListeners``, as the shell binds it."""

    scheme: str  # "amqp", "amqps" or "amqp+unix"
    host: str  # without IPv6 brackets; "" for amqp+unix
    port: int  # 0 for amqp+unix
    path: str = ""  # the socket file of an amqp+unix listener

    @property
    def tls(self) -> bool:
        return self.scheme == "amqps"

    @property
    def unix(self) -> bool:
        return self.scheme == UNIX_SCHEME

    @property
    def local(self) -> bool:
        """Whether only this machine reaches it: a Unix socket, or a loopback address
        (``127.0.0.0/8``, ``::1``, or ``localhost``). Any other host name counts as remote:
        nothing is resolved to decide (a name may resolve differently at bind time)."""
        return self.unix or loopback_host(self.host)

    @property
    def url(self) -> str:
        if self.unix:
            return f"{self.scheme}://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.url
