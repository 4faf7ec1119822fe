"""The authenticator a configuration asks for, with its keys loaded (once, at start-up)."""

from __future__ import annotations

import logging

from gateway.auth.authenticator import AcceptAnyone, Authenticator
from gateway.auth.jwt_tokens import TokenValidator
from gateway.auth.mechanisms import ExternalAuthenticator, SaslAuthenticator, TokenAuthenticator
from gateway.auth.token_keys import load_public_key, load_secret_key
from gateway.config import GatewayConfig

__all__ = ["authenticator_for", "token_validator_for"]

log = logging.getLogger("gateway.auth")


def token_validator_for(config: GatewayConfig) -> TokenValidator | None:
    """The JWT validator of tokenSecretKey/tokenPublicKey, None when neither is set.

    Raises ConfigError (one line, naming the key) when the key cannot be read or used.
    """
    if config.tokenSecretKey:
        key = load_secret_key(config.tokenSecretKey)
    elif config.tokenPublicKey:
        key = load_public_key(config.tokenPublicKey)
    else:
        return None
    return TokenValidator(
        key,
        auth_claim=config.tokenAuthClaim,
        audience_claim=config.tokenAudienceClaim,
        audience=config.tokenAudience,
    )


def authenticator_for(config: GatewayConfig) -> Authenticator:
    """``AcceptAnyone`` with ``authenticationEnabled=false``; otherwise one authenticator per
    mechanism of ``amqpAuthenticationMechanisms`` (config/loading.py has checked that PLAIN/AMQPLAIN
    come with a token key and EXTERNAL with an amqps listener and trusted CAs).

    Raises ConfigError for bad key material, before any client is accepted.
    """
    if not config.authenticationEnabled:
        return AcceptAnyone()
    by_mechanism: dict[str, Authenticator] = {}
    validator = token_validator_for(config)
    for mechanism in config.amqpAuthenticationMechanisms:
        if mechanism in ("PLAIN", "AMQPLAIN") and validator is not None:
            by_mechanism[mechanism] = TokenAuthenticator(validator)
        elif mechanism == "EXTERNAL":
            by_mechanism[mechanism] = ExternalAuthenticator()
    if (
        "EXTERNAL" in by_mechanism
        and config.tlsAllowInsecureConnection
        and not config.tlsRequireTrustedClientCertOnConnect
    ):
        # Python's ssl cannot accept an unverified client certificate yet still ask for one
        # (there is no verify callback), so with tlsAllowInsecureConnection no certificate is
        # requested and EXTERNAL has nothing to go by (docs/security.md).
        log.warning(
            "tlsAllowInsecureConnection=true: client certificates are not requested, so "
            "EXTERNAL logins will be refused"
        )
    return SaslAuthenticator(by_mechanism)
