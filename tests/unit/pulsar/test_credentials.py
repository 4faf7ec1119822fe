"""Broker-client credentials: the parameter forms Pulsar's Java client accepts, the files they
name, and the settings both of the gateway's clients get from them. No network."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from gateway.broker_access import broker_access
from gateway.config import config_from_text
from gateway.pulsar.client import ClientOptions
from gateway.pulsar.credentials import (
    BrokerAccess,
    Credentials,
    CredentialsError,
    admin_ssl_context,
    client_options,
    key_values,
    load_credentials,
    tls_files_from_params,
    token_from_params,
    trust_file,
    trust_store_as_pem_file,
    trust_store_pem,
)
from tests.support.pki import Authority, Pki, make_pki

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJnYXRld2F5In0.c2lnbmF0dXJl"
TLS_URLS = ("pulsar+ssl://broker:6651", "https://broker:8443")


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """A CA with a client certificate (alice) and others, as PEM files in ``tmp_path``."""
    return make_pki(tmp_path)


# ------------------------------------------------------------------------------ token


@pytest.mark.parametrize(
    "params",
    [f"token:{JWT}", JWT, f'{{"token": "{JWT}"}}', f"  token:{JWT}\n", f"token: {JWT} "],
)
def test_token_forms(params: str) -> None:
    assert token_from_params(params) == JWT


def test_token_file_forms(tmp_path: Path) -> None:
    token_file = tmp_path / "my token"  # a space, percent-encoded in the URL
    token_file.write_text(JWT + "\n")
    assert token_from_params(f"file://{tmp_path}/my%20token") == JWT
    assert token_from_params(f"file:{tmp_path}/my%20token") == JWT
    assert token_from_params(f"file://localhost{tmp_path}/my%20token") == JWT


def test_token_file_problems_name_the_key_and_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CredentialsError) as error:
        token_from_params(f"file://{missing}", "amqpBrokerClientAuthenticationParameters")
    assert str(error.value) == (
        "cannot read the token file named by amqpBrokerClientAuthenticationParameters, "
        f"{missing}: No such file or directory"
    )
    with pytest.raises(CredentialsError, match="names host 'server'"):
        token_from_params("file://server/etc/token")
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CredentialsError, match="the token is empty"):
        token_from_params(f"file://{empty}")


@pytest.mark.parametrize(
    ("params", "problem"),
    [
        ("token:", "the token is empty"),
        ("token:abc def", "white space"),
        ('{"token": 5}', 'the JSON form is {"token": "<jwt>"}'),
        ('{"token": ', "not valid JSON"),
    ],
)
def test_bad_tokens(params: str, problem: str) -> None:
    with pytest.raises(CredentialsError, match="brokerClientAuthenticationParameters") as error:
        token_from_params(params)
    assert problem in str(error.value)


# ------------------------------------------------------------------------------ tls


def test_key_value_forms() -> None:
    assert key_values("tlsCertFile:/a.crt,tlsKeyFile:/a.key") == {
        "tlsCertFile": "/a.crt",
        "tlsKeyFile": "/a.key",
    }
    # A value keeps further colons (a file: URL); blanks around items are ignored.
    assert key_values(" tlsCertFile:file:///a.crt , tlsKeyFile:/a.key ,") == {
        "tlsCertFile": "file:///a.crt",
        "tlsKeyFile": "/a.key",
    }
    assert key_values('{"tlsCertFile": "/a.crt", "tlsKeyFile": "/a.key"}') == {
        "tlsCertFile": "/a.crt",
        "tlsKeyFile": "/a.key",
    }
    with pytest.raises(CredentialsError, match="'tlsCertFile' is not name:value"):
        key_values("tlsCertFile")
    with pytest.raises(CredentialsError, match="not valid JSON"):
        key_values('{"tlsCertFile": ')


def test_tls_files() -> None:
    assert tls_files_from_params("tlsCertFile:file:///c/x.crt,tlsKeyFile:/c/x.key") == (
        "/c/x.crt",
        "/c/x.key",
    )
    with pytest.raises(CredentialsError) as error:
        tls_files_from_params("tlsCertFile:/c/x.crt", "amqpBrokerClientAuthenticationParameters")
    assert str(error.value).startswith(
        "amqpBrokerClientAuthenticationParameters: AuthenticationTls needs tlsKeyFile"
    )
    with pytest.raises(CredentialsError, match="needs tlsCertFile and tlsKeyFile"):
        tls_files_from_params("keyStorePath:/x.p12")
    with pytest.raises(CredentialsError, match="data: URL is not supported"):
        tls_files_from_params('{"tlsCertFile": "data:;base64,AAAA", "tlsKeyFile": "/k"}')


def test_tls_credentials_are_loaded_and_checked(tmp_path: Path, pki: Pki) -> None:
    cert, key = pki.alice.cert_path, pki.alice.key_path
    access = BrokerAccess(
        *TLS_URLS, auth_kind="tls", auth_params=f"tlsCertFile:{cert},tlsKeyFile:{key}"
    )
    assert load_credentials(access) == Credentials(cert_file=str(cert), key_file=str(key))

    other_key = pki.server.key_path
    mismatched = BrokerAccess(
        *TLS_URLS, auth_kind="tls", auth_params=f"tlsCertFile:{cert},tlsKeyFile:{other_key}"
    )
    with pytest.raises(CredentialsError) as error:
        load_credentials(mismatched)
    assert str(error.value).startswith(
        f"brokerClientAuthenticationParameters: cannot load the client certificate {cert} "
        f"with key {other_key}: "
    )
    missing = BrokerAccess(
        *TLS_URLS, auth_kind="tls", auth_params=f"tlsCertFile:{tmp_path}/x,tlsKeyFile:{key}"
    )
    with pytest.raises(CredentialsError, match="No such file or directory"):
        load_credentials(missing)


def test_tls_authentication_needs_tls_urls(pki: Pki) -> None:
    cert, key = pki.alice.cert_path, pki.alice.key_path
    params = f"tlsCertFile:{cert},tlsKeyFile:{key}"
    for urls in [
        ("pulsar://broker:6650", "https://broker:8443"),
        ("pulsar+ssl://broker:6651", "http://broker:8080"),
    ]:
        with pytest.raises(CredentialsError, match="authenticates with a TLS client certificate"):
            load_credentials(BrokerAccess(*urls, auth_kind="tls", auth_params=params))


@pytest.mark.parametrize("kind", ["basic", "oauth2"])
def test_unsupported_plugins_are_named(kind: str) -> None:
    with pytest.raises(CredentialsError) as error:
        load_credentials(BrokerAccess(*TLS_URLS, auth_kind=kind, auth_params="x"))
    assert str(error.value).startswith(f"brokerClientAuthenticationPlugin={kind} is not supported")


def test_no_authentication() -> None:
    assert load_credentials(BrokerAccess(*TLS_URLS)) == Credentials()
    assert Credentials().kind == ""


# ------------------------------------------------------------------------------ the clients


def test_trust_file(tmp_path: Path, pki: Pki) -> None:
    ca = pki.ca.cert_path
    assert trust_file(BrokerAccess(*TLS_URLS, trust_certs_file=str(ca))) == str(ca)
    assert trust_file(BrokerAccess(*TLS_URLS, trust_certs_file=f"file://{ca}")) == str(ca)
    # pulsar-client falls back to certifi's bundle; the admin client must trust the same.
    assert trust_file(BrokerAccess(*TLS_URLS)) == certifi.where()
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(CredentialsError) as error:
        trust_file(BrokerAccess(*TLS_URLS, trust_certs_file=str(not_pem)))
    assert str(error.value).startswith(f"cannot load brokerClientTrustCertsFilePath {not_pem}: ")


def test_admin_tls_follows_the_binary_client(pki: Pki) -> None:
    ca, cert, key = pki.ca.cert_path, pki.alice.cert_path, pki.alice.key_path
    plain = BrokerAccess("pulsar://b:6650", "http://b:8080", trust_certs_file=str(ca))
    assert admin_ssl_context(plain, Credentials()) is None

    default = admin_ssl_context(BrokerAccess(*TLS_URLS, trust_certs_file=str(ca)), Credentials())
    assert default is not None
    # As Pulsar's clients: the chain is always verified, the host name only when asked.
    assert default.verify_mode == ssl.CERT_REQUIRED
    assert default.check_hostname is False
    # It trusts the configured CA, and only it.
    subjects = [dict(item[0] for item in c["subject"]) for c in default.get_ca_certs()]
    assert [subject["commonName"] for subject in subjects] == ["Starlight test CA"]

    strict = BrokerAccess(*TLS_URLS, trust_certs_file=str(ca), verify_hostname=True)
    assert (context := admin_ssl_context(strict, Credentials())) is not None
    assert context.check_hostname is True

    insecure = BrokerAccess(*TLS_URLS, verify_hostname=True, allow_insecure=True)
    assert (context := admin_ssl_context(insecure, Credentials())) is not None
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)

    # TLS authentication: the admin client presents the certificate too.
    with_cert = admin_ssl_context(
        BrokerAccess(*TLS_URLS, trust_certs_file=str(ca)),
        Credentials(cert_file=str(cert), key_file=str(key)),
    )
    assert with_cert is not None


def test_client_options(pki: Pki) -> None:
    ca, cert, key = pki.ca.cert_path, pki.alice.cert_path, pki.alice.key_path
    base = ClientOptions(operation_timeout_seconds=7, io_threads=2)
    access = BrokerAccess(
        *TLS_URLS, trust_certs_file=str(ca), verify_hostname=True, allow_insecure=False
    )
    token = client_options(access, Credentials(token=JWT), base)
    assert (token.service_url, token.auth_token, token.auth_tls) == (TLS_URLS[0], JWT, False)
    assert (token.tls_trust_certs_file_path, token.tls_validate_hostname) == (str(ca), True)
    assert (token.operation_timeout_seconds, token.io_threads) == (7, 2)  # base kept

    tls = client_options(access, Credentials(cert_file=str(cert), key_file=str(key)))
    assert tls.auth_tls and tls.auth_token is None
    assert (tls.tls_certificate_file_path, tls.tls_private_key_file_path) == (str(cert), str(key))

    plain = client_options(BrokerAccess("pulsar://b:6650", "http://b:8080"), Credentials())
    assert plain.tls_trust_certs_file_path is None
    assert plain.auth_token is None and not plain.auth_tls


# ------------------------------------------------------------------------------ from config


def config(lines: str) -> BrokerAccess:
    return broker_access(
        config_from_text(
            "brokerServiceURL=pulsar+ssl://b:6651\nbrokerWebServiceURL=https://b:8443\n"
            "configurationStoreServers=z:2181\n" + lines,
            environ={},
        )
    )


def test_broker_access_from_configuration() -> None:
    access = config(
        "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken\n"
        f"brokerClientAuthenticationParameters=token:{JWT}\n"
        "brokerClientTrustCertsFilePath=/ca.pem\n"
        "tlsHostnameVerificationEnabled=true\n"
        "tlsAllowInsecureConnection=true\n"
    )
    assert access == BrokerAccess(
        "pulsar+ssl://b:6651",
        "https://b:8443",
        auth_kind="token",
        auth_params=f"token:{JWT}",
        params_key="brokerClientAuthenticationParameters",
        trust_certs_file="/ca.pem",
        verify_hostname=True,
        allow_insecure=True,
    )


def test_the_gateways_own_parameters_win() -> None:
    access = config(
        "brokerClientAuthenticationPlugin=token\n"
        "brokerClientAuthenticationParameters=token:proxy-token\n"
        f"amqpBrokerClientAuthenticationParameters=token:{JWT}\n"
    )
    assert access.auth_params == f"token:{JWT}"
    assert access.params_key == "amqpBrokerClientAuthenticationParameters"
    assert load_credentials(access).token == JWT


# ------------------------------------------------------------------------------ trust stores


def test_pkcs12_trust_store_becomes_pem(tmp_path: Path) -> None:
    ca, other = Authority(tmp_path), Authority(tmp_path, "Other CA")
    cas = [ca.certificate, other.certificate]
    store = tmp_path / "trust.p12"
    store.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"trust", None, None, cas, serialization.BestAvailableEncryption(b"secret")
        )
    )
    pem = trust_store_pem(str(store), "secret")
    assert pem == ca.cert_path.read_bytes() + other.cert_path.read_bytes()

    with trust_store_as_pem_file(str(store), "secret") as path:
        assert Path(path).read_bytes() == pem
        assert Path(path).stat().st_mode & 0o077 == 0  # private
        context = ssl.create_default_context(cafile=path)
        assert len(context.get_ca_certs()) == 2
    assert not Path(path).exists()

    with pytest.raises(CredentialsError) as wrong:
        trust_store_pem(str(store), "guess")
    assert str(wrong.value) == (
        f"cannot open brokerClientTlsTrustStore {store}: not a PKCS#12 file, or "
        "brokerClientTlsTrustStorePassword is wrong"
    )
    with pytest.raises(CredentialsError, match="No such file or directory"):
        trust_store_pem(str(tmp_path / "missing.p12"), "")
    empty = tmp_path / "empty.p12"
    empty.write_bytes(
        pkcs12.serialize_key_and_certificates(
            b"k", ca.key, None, None, serialization.NoEncryption()
        )
    )
    with pytest.raises(CredentialsError, match="holds no certificates"):
        trust_store_pem(str(empty), "")
