"""Who is connecting: the SASL exchange of Connection.Start-Ok turned into a principal.

The protocol core only reports the mechanism and the raw response (``LoginRequested``); deciding
is done here so that checks which may need I/O (JWT keys, later authorization lookups) stay out
of the sans-IO core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gateway.amqp.errors import AMQPError
from gateway.amqp.sasl import parse_amqplain, parse_plain


class AuthenticationFailed(Exception):
    """The client's credentials were refused; the message is safe to send to the client."""


@dataclass(frozen=True)
class PeerIdentity:
    """What the transport knows about the peer, for EXTERNAL and for logging."""

    address: str
    tls_common_name: str | None = None


class Authenticator(Protocol):
    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        """Return the principal, or raise ``AuthenticationFailed``."""
        ...


class AcceptAnyone:
    """``authenticationEnabled=false``: every client is let in under the name it gives.

    The name is still parsed out of the response so that logs show who connected; a response
    that does not parse is let in as ``anonymous`` because, with authentication off, RabbitMQ
    users expect the credentials to be irrelevant.
    """

    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        try:
            if mechanism == "PLAIN":
                return parse_plain(response)[1] or "anonymous"
            if mechanism == "AMQPLAIN":
                return parse_amqplain(response)[0] or "anonymous"
        except AMQPError:
            return "anonymous"
        if mechanism == "EXTERNAL" and peer.tls_common_name:
            return peer.tls_common_name
        return "anonymous"
