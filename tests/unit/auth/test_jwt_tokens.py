"""Token validation: what is accepted, and every way a token is refused (with the reason)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.auth.jwt_tokens import TokenRejected, TokenValidator
from gateway.auth.token_keys import ValidationKey, load_public_key, load_secret_key
from tests.support.pki import PrivateKey, token_keys


def data_url(raw: bytes) -> str:
    return "data:;base64," + base64.b64encode(raw).decode()


def hmac_key() -> ValidationKey:
    return load_secret_key(data_url(token_keys().secret))


def rsa_key() -> ValidationKey:
    return load_public_key(data_url(token_keys().public_der(token_keys().rsa)))


def ec_key() -> ValidationKey:
    return load_public_key(data_url(token_keys().public_pem(token_keys().ec)))


def hs(claims: dict[str, Any], algorithm: str = "HS256", secret: bytes | None = None) -> str:
    return jwt.encode(claims, secret or token_keys().secret, algorithm=algorithm)


def signed(claims: dict[str, Any], key: PrivateKey, algorithm: str) -> str:
    return jwt.encode(claims, key, algorithm=algorithm)


def rejected(validator: TokenValidator, token: str) -> str:
    with pytest.raises(TokenRejected) as caught:
        validator.principal(token)
    return str(caught.value)


# ------------------------------------------------------------------------------- accepted


@pytest.mark.parametrize("algorithm", ["HS256", "HS384", "HS512"])
def test_hmac_tokens(algorithm: str) -> None:
    assert TokenValidator(hmac_key()).principal(hs({"sub": "alice"}, algorithm)) == "alice"


@pytest.mark.parametrize("algorithm", ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"])
def test_rsa_tokens(algorithm: str) -> None:
    token = signed({"sub": "bob"}, token_keys().rsa, algorithm)
    assert TokenValidator(rsa_key()).principal(token) == "bob"


def test_ec_token() -> None:
    token = signed({"sub": "carol"}, token_keys().ec, "ES256")
    assert TokenValidator(ec_key()).principal(token) == "carol"


def test_valid_time_window_and_surrounding_whitespace() -> None:
    now = int(time.time())
    token = hs({"sub": "alice", "nbf": now - 10, "exp": now + 60, "iat": now + 3600})
    assert TokenValidator(hmac_key()).principal(f" {token}\n") == "alice"


def test_custom_auth_claim() -> None:
    validator = TokenValidator(hmac_key(), auth_claim="role")
    assert validator.principal(hs({"sub": "ignored", "role": "admin"})) == "admin"


def test_audience_as_string_or_list() -> None:
    validator = TokenValidator(hmac_key(), audience_claim="aud", audience="starlight")
    assert validator.principal(hs({"sub": "a", "aud": "starlight"})) == "a"
    assert validator.principal(hs({"sub": "a", "aud": ["other", "starlight"]})) == "a"


def test_audience_in_a_custom_claim() -> None:
    validator = TokenValidator(hmac_key(), audience_claim="brokers", audience="amqp")
    assert validator.principal(hs({"sub": "a", "brokers": ["amqp"]})) == "a"


def test_aud_is_ignored_when_no_audience_is_configured() -> None:
    # pyjwt would refuse this by default; Pulsar accepts it.
    assert TokenValidator(hmac_key()).principal(hs({"sub": "a", "aud": "anything"})) == "a"


# ------------------------------------------------------------------------------- refused


def test_bad_signature() -> None:
    token = hs(
        {"sub": "alice"},
        secret=b"another secret, sixty-four bytes long, for the bad-signature test",
    )
    assert "signature" in rejected(TokenValidator(hmac_key()), token)


def test_tampered_payload() -> None:
    header, _, signature = hs({"sub": "alice"}).split(".")
    payload = base64.urlsafe_b64encode(b'{"sub":"root"}').rstrip(b"=").decode()
    assert "signature" in rejected(TokenValidator(hmac_key()), f"{header}.{payload}.{signature}")


def test_expired() -> None:
    token = hs({"sub": "alice", "exp": int(time.time()) - 5})
    assert "expired" in rejected(TokenValidator(hmac_key()), token)


def test_not_valid_yet() -> None:
    token = hs({"sub": "alice", "nbf": int(time.time()) + 3600})
    assert "not valid yet" in rejected(TokenValidator(hmac_key()), token)


def test_non_numeric_exp() -> None:
    token = hs({"sub": "alice", "exp": "tomorrow"})
    assert "invalid token" in rejected(TokenValidator(hmac_key()), token)


def test_wrong_audience() -> None:
    validator = TokenValidator(hmac_key(), audience_claim="aud", audience="starlight")
    assert "audience" in rejected(validator, hs({"sub": "a", "aud": "elsewhere"}))
    assert "audience" in rejected(validator, hs({"sub": "a", "aud": ["x", "y"]}))


def test_missing_audience() -> None:
    validator = TokenValidator(hmac_key(), audience_claim="aud", audience="starlight")
    assert "no audience claim 'aud'" in rejected(validator, hs({"sub": "a"}))


def test_audience_of_the_wrong_type() -> None:
    validator = TokenValidator(hmac_key(), audience_claim="aud", audience="starlight")
    assert "not a string or list" in rejected(validator, hs({"sub": "a", "aud": 7}))


def test_missing_principal_claim() -> None:
    assert "no 'sub' claim" in rejected(TokenValidator(hmac_key()), hs({"name": "alice"}))
    validator = TokenValidator(hmac_key(), auth_claim="role")
    assert "no 'role' claim" in rejected(validator, hs({"sub": "alice"}))


@pytest.mark.parametrize("value", ["", 42, ["alice"], {"x": 1}])
def test_principal_claim_must_be_a_non_empty_string(value: object) -> None:
    validator = TokenValidator(hmac_key(), auth_claim="role")
    assert "not a non-empty string" in rejected(validator, hs({"role": value}))


@pytest.mark.parametrize(
    "garbage",
    ["", "   ", "guest", "a.b.c", "a.b", "eyJhbGciOiJIUzI1NiJ9.!!!.sig", "\x00\xff", "x" * 5000],
)
def test_garbage(garbage: str) -> None:
    message = rejected(TokenValidator(hmac_key()), garbage)
    assert message
    assert "\n" not in message


def test_unsigned_token_is_refused() -> None:
    token = jwt.encode({"sub": "alice"}, key=None, algorithm="none")
    assert "does not fit the HMAC key" in rejected(TokenValidator(hmac_key()), token)


def test_hmac_token_against_an_rsa_key_is_refused() -> None:
    # The algorithm confusion attack: HS256 "signed" with the RSA public key as the secret.
    public_pem = token_keys().public_pem(token_keys().rsa)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').rstrip(b"=")
    payload = base64.urlsafe_b64encode(b'{"sub":"root"}').rstrip(b"=")
    mac = hmac.new(public_pem, header + b"." + payload, hashlib.sha256).digest()
    token = b".".join([header, payload, base64.urlsafe_b64encode(mac).rstrip(b"=")]).decode()
    assert "does not fit the RSA key" in rejected(TokenValidator(rsa_key()), token)


def test_rsa_token_against_an_hmac_key_is_refused() -> None:
    token = signed({"sub": "alice"}, token_keys().rsa, "RS256")
    assert "expected HS256, HS384, HS512" in rejected(TokenValidator(hmac_key()), token)


def test_ec_token_against_an_rsa_key_is_refused() -> None:
    token = signed({"sub": "alice"}, token_keys().ec, "ES256")
    assert "does not fit the RSA key" in rejected(TokenValidator(rsa_key()), token)


def test_rsa_token_signed_by_another_key() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = signed({"sub": "alice"}, other, "RS256")
    assert "signature" in rejected(TokenValidator(rsa_key()), token)


def test_validation_key_repr_hides_the_secret() -> None:
    assert token_keys().secret.hex() not in repr(hmac_key())
    assert repr(token_keys().secret) not in repr(hmac_key())
