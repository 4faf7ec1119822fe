"""JWT validation the way Pulsar's ``AuthenticationProviderToken`` does it.

* The signature must verify with the configured key, with an algorithm of that key's family.
* ``exp`` and ``nbf`` are enforced when present (no clock skew allowed, Pulsar's default);
  neither is required, since ``pulsar tokens create`` makes tokens without an expiry.
  ``iat`` is not checked (jjwt, under Pulsar, does not either).
* The principal is the string claim ``tokenAuthClaim`` (``sub`` when empty).
* With ``tokenAudienceClaim`` set, that claim must be ``tokenAudience`` or a list containing it.
  pyjwt's own audience check is off: it only knows ``aud`` and would refuse any token that has
  an ``aud`` while none is configured, which Pulsar accepts.

Verification is pure CPU (microseconds for HMAC, tens of microseconds for RSA/EC): it runs on
the event loop, with no I/O, because the key was loaded once at start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import jwt

from gateway.auth.token_keys import ValidationKey

if TYPE_CHECKING:
    from jwt.types import Options  # pyjwt >= 2.10; only for the type checker

__all__ = ["TokenRejected", "TokenValidator"]

_OPTIONS: Final[Options] = {
    "verify_signature": True,
    "verify_exp": True,
    "verify_nbf": True,
    "verify_iat": False,
    "verify_aud": False,
    "verify_iss": False,
    "verify_sub": False,
    "verify_jti": False,
    "require": [],
}


class TokenRejected(Exception):
    """The token is not valid; the message says why, in words fit for the client."""


class TokenValidator:
    def __init__(
        self,
        key: ValidationKey,
        *,
        auth_claim: str = "",
        audience_claim: str = "",
        audience: str = "",
    ) -> None:
        self._key = key
        self._auth_claim = auth_claim or "sub"
        self._audience_claim = audience_claim
        self._audience = audience

    @property
    def key(self) -> ValidationKey:
        return self._key

    def principal(self, token: str) -> str:
        """The principal (role) the token stands for, or raise ``TokenRejected``."""
        claims = self._verified_claims(token)
        if self._audience_claim:
            self._check_audience(claims)
        role = claims.get(self._auth_claim)
        if role is None:
            raise TokenRejected(f"the token has no '{self._auth_claim}' claim")
        if not isinstance(role, str) or not role:
            raise TokenRejected(f"the token's '{self._auth_claim}' claim is not a non-empty string")
        return role

    def _verified_claims(self, token: str) -> dict[str, Any]:
        token = token.strip()  # a token pasted from a file often keeps its newline
        if not token:
            raise TokenRejected("no token (the password must be a JWT)")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected("the password is not a JWT") from None
        algorithm = header.get("alg")
        if algorithm not in self._key.algorithms:
            raise TokenRejected(
                f"token algorithm {str(algorithm)[:20]!r} does not fit the {self._key.family} "
                f"key (expected {', '.join(self._key.algorithms)})"
            )
        try:
            claims = jwt.decode(
                token, self._key.key, algorithms=list(self._key.algorithms), options=_OPTIONS
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected("the token has expired") from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("the token is not valid yet (nbf)") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("the token's signature does not verify") from None
        except jwt.PyJWTError as error:
            # Malformed segments or claims (e.g. a non-numeric exp): pyjwt's text is short
            # and names the problem, never the key.
            raise TokenRejected(f"invalid token: {error}") from None
        if not isinstance(claims, dict):
            raise TokenRejected("invalid token: the payload is not a JSON object")
        return claims

    def _check_audience(self, claims: dict[str, Any]) -> None:
        name = self._audience_claim
        value = claims.get(name)
        if value is None:
            raise TokenRejected(f"the token has no audience claim '{name}'")
        if isinstance(value, str):
            matches = value == self._audience
        elif isinstance(value, list):
            matches = self._audience in value
        else:
            raise TokenRejected(f"the token's audience claim '{name}' is not a string or list")
        if not matches:
            raise TokenRejected(f"the token's audience ('{name}') does not include this gateway")
