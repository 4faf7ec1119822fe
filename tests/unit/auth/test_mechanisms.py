"""PLAIN/AMQPLAIN with a JWT, EXTERNAL with the certificate CN, and the factory's choices."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import jwt
import pytest

from gateway.amqp.fieldtable import encode_table
from gateway.auth.authenticator import AcceptAnyone, AuthenticationFailed, PeerIdentity
from gateway.auth.factory import authenticator_for
from gateway.auth.jwt_tokens import TokenValidator
from gateway.auth.mechanisms import (
    ExternalAuthenticator,
    SaslAuthenticator,
    TokenAuthenticator,
)
from gateway.auth.tls_config import client_certificates_for, tls_settings_for
from gateway.auth.tls_context import ClientCertificates
from gateway.auth.token_keys import load_secret_key
from gateway.config import ConfigError, GatewayConfig, config_from_text
from tests.support.pki import token_keys

PEER = PeerIdentity("10.0.0.1:5000")
SECRET_URL = "data:;base64," + base64.b64encode(token_keys().secret).decode()


def token(sub: str = "alice") -> str:
    return jwt.encode({"sub": sub}, token_keys().secret, algorithm="HS256")


def amqplain(login: object, password: object) -> bytes:
    # The table's entries without its 4-byte length, as py-amqp sends it.
    return encode_table({"LOGIN": login, "PASSWORD": password})[4:]


def tokens() -> TokenAuthenticator:
    return TokenAuthenticator(TokenValidator(load_secret_key(SECRET_URL)))


async def refused(
    authenticator: object, mechanism: str, response: bytes, peer: PeerIdentity = PEER
) -> str:
    with pytest.raises(AuthenticationFailed) as caught:
        await authenticator.authenticate(mechanism, response, peer)  # type: ignore[attr-defined]
    text = str(caught.value)
    assert text.startswith(f"Login was refused using authentication mechanism {mechanism}: ")
    assert "\n" not in text
    return text


async def test_plain_password_is_the_token_and_the_user_is_ignored() -> None:
    auth = tokens()
    assert await auth.authenticate("PLAIN", f"\0whoever\0{token()}".encode(), PEER) == "alice"
    assert await auth.authenticate("PLAIN", f"\0\0{token('bob')}".encode(), PEER) == "bob"


async def test_amqplain_password_is_the_token() -> None:
    auth = tokens()
    assert await auth.authenticate("AMQPLAIN", amqplain("x", token()), PEER) == "alice"


@pytest.mark.parametrize(
    "response",
    [b"", b"garbage", b"\0only-two", b"\0a\0b\0c", b"\0u\0\xff\xfe", b"\0u\0not-a-jwt"],
)
async def test_plain_garbage_is_refused(response: bytes) -> None:
    await refused(tokens(), "PLAIN", response)


@pytest.mark.parametrize(
    "response",
    [b"", b"\xff\xff\xff", amqplain("u", 5), amqplain("u", "nope"), b"\x05LOGINS"],
)
async def test_amqplain_garbage_is_refused(response: bytes) -> None:
    await refused(tokens(), "AMQPLAIN", response)


async def test_expired_token_reason_reaches_the_text() -> None:
    expired = jwt.encode({"sub": "a", "exp": 1}, token_keys().secret, algorithm="HS256")
    assert "expired" in await refused(tokens(), "PLAIN", f"\0u\0{expired}".encode())


async def test_external_is_the_verified_common_name() -> None:
    peer = dataclasses.replace(PEER, tls_common_name="alice")
    assert await ExternalAuthenticator().authenticate("EXTERNAL", b"", peer) == "alice"


async def test_external_without_a_verified_certificate_is_refused() -> None:
    text = await refused(ExternalAuthenticator(), "EXTERNAL", b"")
    assert "verified client certificate" in text


async def test_sasl_dispatch_refuses_mechanisms_it_was_not_given() -> None:
    auth = SaslAuthenticator({"PLAIN": tokens()})
    assert await auth.authenticate("PLAIN", f"\0u\0{token()}".encode(), PEER) == "alice"
    await refused(auth, "EXTERNAL", b"")


# ------------------------------------------------------------------------------ factory

BASE = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
)


def config(extra: str) -> GatewayConfig:
    return config_from_text(BASE + extra, environ={})


def test_authentication_off_accepts_anyone() -> None:
    assert isinstance(authenticator_for(config("")), AcceptAnyone)


async def test_authentication_on_with_plain_and_amqplain() -> None:
    auth = authenticator_for(
        config(
            "authenticationEnabled=true\namqpAuthenticationMechanisms=PLAIN,AMQPLAIN\n"
            f"tokenSecretKey={SECRET_URL}\n"
        )
    )
    assert isinstance(auth, SaslAuthenticator)
    assert auth.mechanisms == ("PLAIN", "AMQPLAIN")
    assert await auth.authenticate("AMQPLAIN", amqplain("", token()), PEER) == "alice"


def test_factory_applies_claim_and_audience_keys() -> None:
    auth = authenticator_for(
        config(
            "authenticationEnabled=true\n"
            f"tokenSecretKey={SECRET_URL}\n"
            "tokenAuthClaim=role\ntokenAudienceClaim=aud\ntokenAudience=amqp\n"
        )
    )
    assert isinstance(auth, SaslAuthenticator)


def test_factory_reports_bad_key_material_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        authenticator_for(
            config(f"authenticationEnabled=true\ntokenPublicKey=file://{tmp_path}/missing.pem\n")
        )
    assert caught.value.key == "tokenPublicKey"
    assert "missing.pem" in str(caught.value)


TLS = "amqpListeners=amqps://127.0.0.1:5671\ntlsCertificateFilePath=/c.pem\ntlsKeyFilePath=/k.pem\n"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("", ClientCertificates.NONE),
        ("tlsTrustCertsFilePath=/ca.pem\n", ClientCertificates.OPTIONAL),
        (
            "tlsTrustCertsFilePath=/ca.pem\namqpAuthenticationMechanisms=EXTERNAL\n",
            ClientCertificates.OPTIONAL,
        ),
        (
            "tlsTrustCertsFilePath=/ca.pem\ntlsRequireTrustedClientCertOnConnect=true\n",
            ClientCertificates.REQUIRED,
        ),
        (
            "tlsTrustCertsFilePath=/ca.pem\ntlsAllowInsecureConnection=true\n",
            ClientCertificates.NONE,
        ),
        (
            "tlsTrustCertsFilePath=/ca.pem\ntlsAllowInsecureConnection=true\n"
            "tlsRequireTrustedClientCertOnConnect=true\n",
            ClientCertificates.REQUIRED,
        ),
    ],
)
def test_client_certificate_policy(extra: str, expected: ClientCertificates) -> None:
    assert client_certificates_for(config(TLS + extra)) is expected


def test_tls_settings_from_stores_replace_pem_files() -> None:
    settings = tls_settings_for(
        config(
            TLS + "tlsEnabledWithKeyStore=true\ntlsKeyStore=/ks.p12\ntlsKeyStorePassword=pw\n"
            "tlsTrustStore=/ts.p12\ntlsCertRefreshCheckDurationSec=7\n"
        )
    )
    assert settings is not None
    assert (settings.key_store, settings.certificate_file, settings.trust_store) == (
        "/ks.p12",
        "",
        "/ts.p12",
    )
    assert settings.files == ("/ks.p12", "/ts.p12")
    assert settings.refresh_interval == 7.0
    assert "pw" not in repr(settings)


def test_no_tls_settings_without_amqps_listeners() -> None:
    assert tls_settings_for(config("")) is None


def test_insecure_connection_with_external_warns(caplog: pytest.LogCaptureFixture) -> None:
    authenticator_for(
        config(
            TLS + "tlsTrustCertsFilePath=/ca.pem\nauthenticationEnabled=true\n"
            "amqpAuthenticationMechanisms=EXTERNAL\ntlsAllowInsecureConnection=true\n"
        )
    )
    assert "EXTERNAL logins will be refused" in caplog.text
