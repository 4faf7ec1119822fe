"""tokenSecretKey / tokenPublicKey: every accepted form, and a one-line error naming the key."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from gateway.auth.token_keys import load_public_key, load_secret_key
from gateway.config import ConfigError
from tests.support.pki import token_keys


def data_url(raw: bytes) -> str:
    return "data:;base64," + base64.b64encode(raw).decode()


def test_secret_key_from_data_url_is_the_decoded_bytes() -> None:
    key = load_secret_key(data_url(token_keys().secret))
    assert key.key == token_keys().secret
    assert key.algorithms == ("HS256", "HS384", "HS512")


def test_secret_key_file_is_raw_bytes(tmp_path: Path) -> None:
    # Pulsar's `tokens create-secret-key --output` writes the raw key, which is not UTF-8.
    path = tmp_path / "secret.key"
    path.write_bytes(token_keys().secret)
    assert load_secret_key(f"file://{path}").key == token_keys().secret


def test_secret_key_data_url_with_media_type() -> None:
    url = "data:application/octet-stream;base64," + base64.b64encode(bytes(32)).decode()
    assert load_secret_key(url).key == bytes(32)


@pytest.mark.parametrize("curve", ["rsa", "ec"])
@pytest.mark.parametrize("encoding", ["der", "pem"])
@pytest.mark.parametrize("form", ["data", "file"])
def test_public_key_forms(tmp_path: Path, curve: str, encoding: str, form: str) -> None:
    keys = token_keys()
    private = keys.rsa if curve == "rsa" else keys.ec
    raw = keys.public_der(private) if encoding == "der" else keys.public_pem(private)
    if form == "data":
        url = data_url(raw)
    else:
        path = tmp_path / f"public.{encoding}"
        path.write_bytes(raw)
        url = f"file://{path}"
    key = load_public_key(url)
    assert key.family == curve.upper()
    if curve == "rsa":
        assert "RS256" in key.algorithms and "PS512" in key.algorithms
    else:
        assert key.algorithms == ("ES256",)


def test_ec_curves_pin_their_algorithm() -> None:
    p384 = ec.generate_private_key(ec.SECP384R1()).public_key()
    der = p384.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert load_public_key(data_url(der)).algorithms == ("ES384",)


def one_line_error(call: object, key: str) -> str:
    with pytest.raises(ConfigError) as caught:
        call()  # type: ignore[operator]
    message = str(caught.value)
    assert caught.value.key == key
    assert message.startswith(key + ":")
    assert "\n" not in message
    return message


def test_missing_file_names_the_key_and_path(tmp_path: Path) -> None:
    message = one_line_error(
        lambda: load_secret_key(f"file://{tmp_path}/nope.key"), "tokenSecretKey"
    )
    assert "nope.key" in message and "No such file" in message


def test_short_secret_is_refused_without_echoing_it() -> None:
    message = one_line_error(lambda: load_secret_key(data_url(b"hunter2")), "tokenSecretKey")
    assert "7 bytes" in message
    assert "hunter2" not in message and base64.b64encode(b"hunter2").decode() not in message


def test_pem_given_as_secret_key_is_refused() -> None:
    pem = token_keys().public_pem(token_keys().rsa)
    message = one_line_error(lambda: load_secret_key(data_url(pem)), "tokenSecretKey")
    assert "tokenPublicKey" in message


def test_garbage_public_key() -> None:
    message = one_line_error(lambda: load_public_key(data_url(b"x" * 64)), "tokenPublicKey")
    assert "DER or PEM" in message


def test_private_key_given_as_public_key_is_refused() -> None:
    pem = token_keys().ec.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    one_line_error(lambda: load_public_key(data_url(pem)), "tokenPublicKey")


def test_unsupported_key_type() -> None:
    der = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    message = one_line_error(lambda: load_public_key(data_url(der)), "tokenPublicKey")
    assert "RSA or EC" in message


def test_unsupported_url_form() -> None:
    one_line_error(lambda: load_public_key("http://example.com/key"), "tokenPublicKey")
