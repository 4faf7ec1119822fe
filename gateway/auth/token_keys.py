"""The key that validates JWTs, read once at start-up from ``tokenSecretKey``/``tokenPublicKey``.

Both keys come as ``data:;base64,<base64>`` or ``file:///path`` (config/values.py has checked
the form only). The contents follow Pulsar's ``AuthTokenUtils``, so that the key files of a
Pulsar cluster work unchanged:

* a secret key is the raw HMAC key bytes: the base64-decoded ``data:`` payload, or the file's
  bytes as they are (``pulsar tokens create-secret-key --output`` writes raw bytes);
* a public key is a SubjectPublicKeyInfo, DER (what Pulsar writes) or PEM (what ``openssl``
  writes), RSA or EC.

The algorithms a key accepts follow from its type, never from the token: an RSA public key must
not validate an HS256 token signed with the public key as the HMAC secret (the classic algorithm
confusion attack), so each key carries its own short list.

Anything wrong is a :class:`~gateway.config.ConfigError` naming the key, on one line; the key's
value is never repeated (tokenSecretKey is secret).
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from dataclasses import dataclass
from typing import Final

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gateway.auth.key_files import read_file
from gateway.config import ConfigError

__all__ = ["ValidationKey", "load_public_key", "load_secret_key", "read_key_url"]

# Pulsar's HS256 keys are 32 bytes; RFC 7518 3.2 asks for a key at least as long as the hash.
# Shorter keys are refused rather than weakening every token.
MIN_SECRET_KEY_BYTES: Final = 32

_HMAC_ALGORITHMS: Final = ("HS256", "HS384", "HS512")
_RSA_ALGORITHMS: Final = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
# RFC 7518 3.4: each ES algorithm is bound to one curve.
_EC_ALGORITHMS: Final = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


@dataclass(frozen=True, repr=False)
class ValidationKey:
    """A key and the JWT algorithms it may validate."""

    key: bytes | PublicKey
    algorithms: tuple[str, ...]
    #: "HMAC", "RSA" or "EC", for messages.
    family: str

    def __repr__(self) -> str:
        # Never let an HMAC secret reach a log through repr.
        return f"ValidationKey({self.family}, {'/'.join(self.algorithms)})"


def read_key_url(url: str, key_name: str) -> bytes:
    """The bytes behind a ``data:`` or ``file:`` URL; ConfigError naming ``key_name``."""
    if url.startswith("data:"):
        _, comma, payload = url.partition(",")
        if not comma or ";base64" not in url[: url.find(",")]:
            raise ConfigError(f"{key_name}: a data: URL must be data:;base64,<key>", key=key_name)
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(
                f"{key_name}: the data: URL does not hold valid base64", key=key_name
            ) from None
    if url.startswith("file://"):
        return read_file(urllib.parse.unquote(url[len("file://") :]), key_name)
    raise ConfigError(
        f"{key_name}: use data:;base64,<base64 key> or file:///absolute/path/to/key", key=key_name
    )


def load_secret_key(url: str, key_name: str = "tokenSecretKey") -> ValidationKey:
    """An HMAC key (HS256/HS384/HS512) from a data: or file: URL."""
    secret = read_key_url(url, key_name)
    if not secret:
        raise ConfigError(f"{key_name}: the key is empty", key=key_name)
    if secret.lstrip().startswith(b"-----BEGIN"):
        # A PEM block here is almost certainly a public/private key given to the wrong key.
        raise ConfigError(
            f"{key_name}: holds a PEM key; an HMAC secret is raw bytes (use tokenPublicKey "
            "for RSA or EC public keys)",
            key=key_name,
        )
    if len(secret) < MIN_SECRET_KEY_BYTES:
        raise ConfigError(
            f"{key_name}: the secret is {len(secret)} bytes; HMAC keys must be at least "
            f"{MIN_SECRET_KEY_BYTES} bytes (256 bits)",
            key=key_name,
        )
    return ValidationKey(secret, _HMAC_ALGORITHMS, "HMAC")


def load_public_key(url: str, key_name: str = "tokenPublicKey") -> ValidationKey:
    """An RSA or EC public key, DER or PEM, from a data: or file: URL."""
    data = read_key_url(url, key_name)
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data.lstrip())
        else:
            key = serialization.load_der_public_key(data)
    except (ValueError, TypeError):
        raise ConfigError(
            f"{key_name}: not a DER or PEM public key (SubjectPublicKeyInfo); a private key or "
            "a certificate does not fit here",
            key=key_name,
        ) from None
    except Exception as error:  # cryptography raises UnsupportedAlgorithm for odd keys
        raise ConfigError(
            f"{key_name}: cannot load the public key: {error}", key=key_name
        ) from None
    if isinstance(key, rsa.RSAPublicKey):
        return ValidationKey(key, _RSA_ALGORITHMS, "RSA")
    if isinstance(key, ec.EllipticCurvePublicKey):
        algorithm = _EC_ALGORITHMS.get(key.curve.name)
        if algorithm is None:
            raise ConfigError(
                f"{key_name}: EC curve {key.curve.name} has no JWT algorithm; use P-256, P-384 "
                "or P-521",
                key=key_name,
            )
        return ValidationKey(key, (algorithm,), "EC")
    raise ConfigError(
        f"{key_name}: {type(key).__name__.removeprefix('_')} keys are not supported; use an RSA "
        "or EC public key",
        key=key_name,
    )
