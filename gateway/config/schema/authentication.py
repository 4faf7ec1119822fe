"""Authentication keys (reference/002, second table): SASL mechanisms and the JWT keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import Kind, Section, key_metadata
from gateway.config.schema.amqp import AmqpKeys

# Every key of this module is in one section of the documentation.
_AUTH = Section.AUTHENTICATION


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class AuthenticationKeys(AmqpKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- Authentication (reference/002, second table) -----------------------------------
    authenticationEnabled: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Whether AMQP clients must authenticate. When false, any credentials are
            accepted, so the gateway then refuses to start with an AMQP listener on an address
            other than loopback unless amqpAllowUnauthenticatedRemote=true.""",
            _AUTH,
        )
    )
    amqpAuthenticationMechanisms: tuple[str, ...] = field(
        metadata=key_metadata(
            Kind.MECHANISMS,
            "PLAIN",
            """SASL mechanisms offered to clients, comma-separated, from PLAIN, AMQPLAIN and
            EXTERNAL. PLAIN and AMQPLAIN take a JWT as the password (the username is ignored);
            EXTERNAL authenticates with the common name of the TLS client certificate and needs
            an amqps listener. With authenticationEnabled=false, AMQPLAIN is offered too
            wherever PLAIN is, as RabbitMQ offers both (no credentials are checked then).""",
            _AUTH,
        )
    )
    tokenSecretKey: str = field(
        metadata=key_metadata(
            Kind.TOKEN_KEY,
            "",
            """Secret (HMAC) key that validates JWTs: `data:;base64,<key>` or
            `file:///path/to/key` (DER-encoded). With authentication and PLAIN or AMQPLAIN,
            set exactly one of tokenSecretKey and tokenPublicKey.""",
            _AUTH,
            secret=True,
        )
    )
    tokenPublicKey: str = field(
        metadata=key_metadata(
            Kind.TOKEN_KEY,
            "",
            """Public (RSA or EC) key that validates JWTs, in the same forms as
            tokenSecretKey.""",
            _AUTH,
        )
    )
    tokenAuthClaim: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "JWT claim used as the principal (role). Empty: the `sub` claim.",
            _AUTH,
        )
    )
    tokenAudienceClaim: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """JWT claim holding the audience, e.g. `aud`. Empty: the audience is not
            verified.""",
            _AUTH,
        )
    )
    tokenAudience: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """The audience this gateway stands for: the tokenAudienceClaim of a valid token
            must contain it. Required when tokenAudienceClaim is set.""",
            _AUTH,
        )
    )
