"""The server SSLContext from the TLS keys: files, stores, client certificates, versions,
ciphers."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from gateway.auth.tls_context import ClientCertificates, TlsSettings, build_server_context
from gateway.auth.tls_identity import common_name
from gateway.config import ConfigError
from tests.support.pki import Pki, make_pki
from tests.unit.auth.tls_pair import handshake


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def pem(pki: Pki, **changes: object) -> TlsSettings:
    settings = TlsSettings(
        certificate_file=str(pki.server.cert_path),
        key_file=str(pki.server.key_path),
        trust_certs_file=str(pki.ca.cert_path),
    )
    return TlsSettings(**{**settings.__dict__, **changes})  # type: ignore[arg-type]


def config_error(settings: TlsSettings, key: str) -> str:
    with pytest.raises(ConfigError) as caught:
        build_server_context(settings)
    assert caught.value.key == key, caught.value
    assert "\n" not in str(caught.value)
    return str(caught.value)


async def test_pem_files_serve_tls_without_asking_for_a_client_certificate(pki: Pki) -> None:
    context = build_server_context(pem(pki))
    assert context.verify_mode == ssl.CERT_NONE
    outcome = await handshake(context, pki.client_context(pki.alice))
    assert outcome.ok
    assert not outcome.peer_certificate  # not asked for, so not sent


async def test_optional_client_certificate(pki: Pki) -> None:
    context = build_server_context(pem(pki, client_certificates=ClientCertificates.OPTIONAL))
    assert context.verify_mode == ssl.CERT_OPTIONAL
    with_cert = await handshake(context, pki.client_context(pki.alice))
    assert with_cert.ok and common_name(with_cert.peer_certificate) == "alice"
    without = await handshake(context, pki.client_context())
    assert without.ok and common_name(without.peer_certificate) is None
    untrusted = await handshake(context, pki.client_context(pki.untrusted))
    assert isinstance(untrusted.server_error, ssl.SSLCertVerificationError)


async def test_required_client_certificate(pki: Pki) -> None:
    context = build_server_context(pem(pki, client_certificates=ClientCertificates.REQUIRED))
    assert (await handshake(context, pki.client_context(pki.alice))).ok
    without = await handshake(context, pki.client_context())
    assert without.server_error is not None
    assert "CERTIFICATE" in str(without.server_error)


@pytest.mark.parametrize("password", ["changeit", ""])
async def test_pkcs12_key_and_trust_stores(pki: Pki, password: str) -> None:
    settings = TlsSettings(
        key_store=str(pki.key_store(password)),
        key_store_password=password,
        trust_store=str(pki.trust_store(password)),
        trust_store_password=password,
        client_certificates=ClientCertificates.OPTIONAL,
    )
    context = build_server_context(settings)
    outcome = await handshake(context, pki.client_context(pki.alice))
    assert outcome.ok
    assert outcome.server_serial == pki.server.serial
    assert common_name(outcome.peer_certificate) == "alice"
    untrusted = await handshake(context, pki.client_context(pki.untrusted))
    assert untrusted.server_error is not None


def test_pkcs12_wrong_password(pki: Pki) -> None:
    settings = TlsSettings(key_store=str(pki.key_store("right")), key_store_password="wrong")
    assert "tlsKeyStorePassword" in config_error(settings, "tlsKeyStore")


def test_trust_store_wrong_password(pki: Pki) -> None:
    settings = TlsSettings(
        key_store=str(pki.key_store("")),
        trust_store=str(pki.trust_store("right")),
        trust_store_password="wrong",
        client_certificates=ClientCertificates.OPTIONAL,
    )
    config_error(settings, "tlsTrustStore")


def test_a_jks_or_garbage_key_store(tmp_path: Path) -> None:
    store = tmp_path / "store.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed" + bytes(100))  # JKS magic
    assert "PKCS#12" in config_error(TlsSettings(key_store=str(store)), "tlsKeyStore")


def test_trust_store_without_certificates(pki: Pki) -> None:
    # A store holding only a key (no certificate at all) trusts nobody.
    path = pki.directory / "keyonly.p12"
    path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"k", pki.alice.key, None, None, serialization.NoEncryption()
        )
    )
    settings = TlsSettings(
        key_store=str(pki.key_store("")),
        trust_store=str(path),
        client_certificates=ClientCertificates.OPTIONAL,
    )
    assert "no certificate" in config_error(settings, "tlsTrustStore")


def test_missing_certificate_file(pki: Pki) -> None:
    message = config_error(pem(pki, certificate_file="/nope/server.crt"), "tlsCertificateFilePath")
    assert "/nope/server.crt" in message and "No such file" in message


def test_missing_key_file(pki: Pki) -> None:
    config_error(pem(pki, key_file="/nope/server.key"), "tlsKeyFilePath")


def test_key_of_another_certificate(pki: Pki) -> None:
    message = config_error(pem(pki, key_file=str(pki.alice.key_path)), "tlsCertificateFilePath")
    assert "mismatch" in message


def test_encrypted_key_is_refused_instead_of_prompting(pki: Pki) -> None:
    path = pki.directory / "encrypted.key"
    path.write_bytes(
        pki.server.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    assert "encrypted" in config_error(pem(pki, key_file=str(path)), "tlsKeyFilePath")


def test_garbage_trust_file(pki: Pki) -> None:
    path = pki.directory / "garbage.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    settings = pem(pki, trust_certs_file=str(path), client_certificates=ClientCertificates.OPTIONAL)
    config_error(settings, "tlsTrustCertsFilePath")


def test_protocol_range(pki: Pki) -> None:
    context = build_server_context(pem(pki, protocols=("TLSv1.3",)))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3
    both = build_server_context(pem(pki, protocols=("TLSv1.3", "TLSv1.2")))
    assert both.minimum_version == ssl.TLSVersion.TLSv1_2


async def test_tls13_only_refuses_a_tls12_client(pki: Pki) -> None:
    context = build_server_context(pem(pki, protocols=("TLSv1.3",)))
    client = pki.client_context()
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    outcome = await handshake(context, client)
    assert outcome.server_error is not None


async def test_java_cipher_names(pki: Pki) -> None:
    # The server's key is EC, so an ECDSA suite; listing no TLS 1.3 suite means TLS 1.2.
    context = build_server_context(pem(pki, ciphers=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",)))
    outcome = await handshake(context, pki.client_context())
    assert outcome.ok
    assert outcome.version == "TLSv1.2"
    assert outcome.cipher == "ECDHE-ECDSA-AES256-GCM-SHA384"


async def test_tls13_suites_only_mean_tls13(pki: Pki) -> None:
    context = build_server_context(pem(pki, ciphers=("TLS_AES_256_GCM_SHA384",)))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_3
    outcome = await handshake(context, pki.client_context())
    assert outcome.ok and outcome.version == "TLSv1.3"


def test_unknown_cipher_is_named(pki: Pki) -> None:
    message = config_error(
        pem(pki, ciphers=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_FOO_WITH_BAR_SHA")),
        "tlsCiphers",
    )
    assert "TLS_FOO_WITH_BAR_SHA" in message


def test_tls13_suites_with_tls12_only_protocols(pki: Pki) -> None:
    message = config_error(
        pem(pki, protocols=("TLSv1.2",), ciphers=("TLS_AES_128_GCM_SHA256",)), "tlsCiphers"
    )
    assert "TLSv1.3" in message


def test_tls12_suites_with_tls13_only_protocols(pki: Pki) -> None:
    config_error(
        pem(pki, protocols=("TLSv1.3",), ciphers=("ECDHE-ECDSA-AES128-GCM-SHA256",)),
        "tlsCiphers",
    )
