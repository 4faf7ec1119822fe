"""Where the shell listens: one type from the ``amqpListeners`` key to the bound socket.

Standard library only, so that ``gateway/config`` can build it without importing the shell's
dependencies (``gateway/auth`` imports the configuration's errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The scheme of a listener on a Unix domain socket: ``amqp+unix:///absolute/path.sock``.
UNIX_SCHEME: Final = "amqp+unix"


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
    def url(self) -> str:
        if self.unix:
            return f"{self.scheme}://{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    def __str__(self) -> str:
        return self.url
