"""The SASL mechanisms with ``authenticationEnabled=true``: who a login response stands for.

* PLAIN and AMQPLAIN carry a JWT as the password; the user name (LOGIN) is ignored, as in
  reference/002 ("The username is ignored and the password is used as the JSON Web Token").
* EXTERNAL is the verified TLS client certificate's common name, as RabbitMQ's
  rabbitmq_auth_mechanism_ssl with ``ssl_cert_login_from = common_name``. The SASL response
  (an authorization identity, usually empty) is ignored, as RabbitMQ does.

Every refusal is an ``AuthenticationFailed`` whose text is RabbitMQ's wording plus the reason,
e.g. ``Login was refused using authentication mechanism PLAIN: the token has expired``; the
shell sends it in Connection.Close 403 and logs it.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.amqp.errors import AMQPError
from gateway.amqp.sasl import parse_amqplain
from gateway.auth.authenticator import AuthenticationFailed, Authenticator, PeerIdentity
from gateway.auth.jwt_tokens import TokenRejected, TokenValidator

__all__ = ["ExternalAuthenticator", "SaslAuthenticator", "TokenAuthenticator", "refused"]


def refused(mechanism: str, reason: str) -> AuthenticationFailed:
    return AuthenticationFailed(
        f"Login was refused using authentication mechanism {mechanism}: {reason}"
    )


def _plain_password(response: bytes) -> str:
    """The password of a PLAIN response ``authzid NUL user NUL password`` (RFC 4616).

    ``gateway.amqp.sasl.parse_plain`` insists on a user name; a token login ignores it, and
    clients given only a token (``amqps://:<jwt>@host``) send an empty one.
    """
    parts = bytes(response).split(b"\x00")
    if len(parts) != 3:
        raise TokenRejected("the response is not 'authzid NUL user NUL password'")
    try:
        return parts[2].decode("utf-8")
    except UnicodeDecodeError:
        raise TokenRejected("the password is not valid UTF-8") from None


class TokenAuthenticator:
    """PLAIN and AMQPLAIN: the password is a JWT, its claim is the principal."""

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator

    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        try:
            if mechanism == "PLAIN":
                token = _plain_password(response)
            elif mechanism == "AMQPLAIN":
                try:
                    token = parse_amqplain(response)[1]
                except AMQPError:
                    raise TokenRejected("the response is not a LOGIN/PASSWORD table") from None
            else:
                raise TokenRejected("not a token mechanism")
            return self._validator.principal(token)
        except TokenRejected as rejected:
            raise refused(mechanism, str(rejected)) from None


class ExternalAuthenticator:
    """EXTERNAL: the common name of a client certificate that a trusted CA signed."""

    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        if peer.tls_common_name:
            return peer.tls_common_name
        raise refused(
            mechanism,
            "no verified client certificate with a common name on this connection "
            "(EXTERNAL needs TLS and a certificate signed by a trusted CA)",
        )


class SaslAuthenticator:
    """Hands each login to the authenticator of its mechanism; the others are refused.

    The protocol core only reports mechanisms it offered, so an unknown one here means a
    mechanism was offered without an authenticator: refused, never let through.
    """

    def __init__(self, by_mechanism: Mapping[str, Authenticator]) -> None:
        self._by_mechanism = dict(by_mechanism)

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return tuple(self._by_mechanism)

    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        authenticator = self._by_mechanism.get(mechanism)
        if authenticator is None:
            raise refused(mechanism, "mechanism not enabled")
        return await authenticator.authenticate(mechanism, response, peer)
