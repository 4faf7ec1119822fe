"""A gateway that cannot use the secured Pulsar stops at start-up with one line naming the
problem and the key to check, and within seconds (not after pulsar-client's retries)."""

from __future__ import annotations

import datetime
import socket
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.app import open_gateway
from gateway.config import GatewayConfig
from gateway.pulsar.access_check import BrokerAccessError, check_binary
from gateway.pulsar.credentials import BrokerAccess, Credentials
from gateway.server.server import StartupError
from tests.integration.secured_pulsar.support import (
    TLS_PLUGIN,
    SecuredStack,
    forwarded,
    gateway_config,
    token_settings,
)
from tests.support.pki import Authority

pytestmark = pytest.mark.integration

# Far below pulsar-client's operation timeout (30 s): the answer comes from a check, not a wait.
QUICK = 10.0


async def startup_error(config: GatewayConfig) -> str:
    started = time.monotonic()
    with pytest.raises(StartupError) as failed:
        async with open_gateway(config):
            pass
    assert time.monotonic() - started < QUICK
    message = str(failed.value)
    assert "\n" not in message
    return message


def other_ca(folder: Path) -> Path:
    """A CA certificate that did not sign the broker's certificate."""
    return Authority(folder, "Some other CA").cert_path


async def test_a_wrong_token_is_named(secured_pulsar: SecuredStack) -> None:
    settings = token_settings(secured_pulsar, "token:eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl")
    message = await startup_error(gateway_config(secured_pulsar, "default", settings))
    assert message == (
        "Pulsar refused the gateway's credentials (HTTP 401) at "
        f"{secured_pulsar.web_url}: check brokerClientAuthenticationParameters"
    )


async def test_a_wrong_override_is_named(secured_pulsar: SecuredStack) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings += "amqpBrokerClientAuthenticationParameters=token:not.a.token\n"
    message = await startup_error(gateway_config(secured_pulsar, "default", settings))
    assert message.endswith("check amqpBrokerClientAuthenticationParameters")


async def test_no_credentials_at_all(secured_pulsar: SecuredStack) -> None:
    settings = f"brokerClientTrustCertsFilePath={secured_pulsar.ca_cert}\n"
    message = await startup_error(gateway_config(secured_pulsar, "default", settings))
    assert message.startswith("Pulsar requires authentication (HTTP 401)")
    assert "set brokerClientAuthenticationPlugin" in message


async def test_an_untrusted_broker_certificate(
    secured_pulsar: SecuredStack, tmp_path: Path
) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings = settings.replace(secured_pulsar.ca_cert, str(other_ca(tmp_path)))
    message = await startup_error(gateway_config(secured_pulsar, "default", settings))
    assert message.startswith(f"the TLS handshake with Pulsar at {secured_pulsar.web_url} failed")
    assert "self-signed certificate" in message or "local issuer" in message
    assert "check brokerClientTrustCertsFilePath" in message


async def test_the_default_trust_does_not_know_a_private_ca(
    secured_pulsar: SecuredStack,
) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings = settings.replace(f"brokerClientTrustCertsFilePath={secured_pulsar.ca_cert}\n", "")
    message = await startup_error(gateway_config(secured_pulsar, "default", settings))
    assert "set brokerClientTrustCertsFilePath to the CA" in message


async def test_hostname_verification_refuses_an_address_the_certificate_lacks(
    secured_pulsar: SecuredStack,
) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings += "tlsHostnameVerificationEnabled=true\n"
    with forwarded(secured_pulsar) as (broker_url, web_url):
        config = gateway_config(
            secured_pulsar, "default", settings, broker_url=broker_url, web_url=web_url
        )
        message = await startup_error(config)
    assert message.startswith(f"the TLS handshake with Pulsar at {web_url} failed")
    assert "mismatch, certificate is not valid for '127.0.0.2'" in message
    assert "tlsHostnameVerificationEnabled=false" in message


async def test_hostname_verification_on_the_binary_protocol(
    secured_pulsar: SecuredStack,
) -> None:
    """The admin URL is fine; only the broker URL names an address the certificate lacks:
    the binary-protocol check reports it (pulsar-client itself only says ConnectError)."""
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings += "tlsHostnameVerificationEnabled=true\n"
    with forwarded(secured_pulsar) as (broker_url, _web_url):
        config = gateway_config(secured_pulsar, "default", settings, broker_url=broker_url)
        message = await startup_error(config)
    assert message.startswith(f"the TLS handshake with Pulsar at {broker_url} failed")
    assert "not valid for '127.0.0.2'" in message


async def test_plaintext_to_the_tls_broker_port(secured_pulsar: SecuredStack) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    broker_url = f"pulsar://127.0.0.1:{secured_pulsar.broker_port}"
    config = gateway_config(secured_pulsar, "default", settings, broker_url=broker_url)
    message = await startup_error(config)
    assert message == (
        f"the Pulsar broker port of {broker_url} expects TLS: use a pulsar+ssl:// brokerServiceURL"
    )


async def test_the_binary_protocol_check_names_refused_credentials(
    secured_pulsar: SecuredStack,
) -> None:
    """In a gateway the admin check refuses a wrong token first; the binary-protocol check,
    for a broker URL whose listener authenticates differently, says the same on its own."""
    access = BrokerAccess(
        secured_pulsar.broker_url,
        secured_pulsar.web_url,
        auth_kind="token",
        params_key="amqpBrokerClientAuthenticationParameters",
        trust_certs_file=secured_pulsar.ca_cert,
    )
    with pytest.raises(BrokerAccessError) as refused:
        await check_binary(access, Credentials(token="eyJhbGciOiJIUzI1NiJ9.e30.c2ln"))
    assert str(refused.value).startswith(
        f"Pulsar refused the gateway's credentials at {secured_pulsar.broker_url}"
    )
    assert str(refused.value).endswith("check amqpBrokerClientAuthenticationParameters")
    await check_binary(access, Credentials(token=secured_pulsar.superuser_token))
    await check_binary(
        access,
        Credentials(cert_file=secured_pulsar.client_cert, key_file=secured_pulsar.client_key),
    )


async def test_tls_to_a_port_that_does_not_speak_it(secured_pulsar: SecuredStack) -> None:
    """The admin URL is right; the broker URL says TLS but points at ZooKeeper's port."""
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    zookeeper_port = secured_pulsar.zookeeper.rsplit(":", 1)[1]
    broker_url = f"pulsar+ssl://127.0.0.1:{zookeeper_port}"
    config = gateway_config(secured_pulsar, "default", settings, broker_url=broker_url)
    message = await startup_error(config)
    assert message.startswith(f"the TLS handshake with Pulsar at {broker_url} failed")


async def test_tls_authentication_needs_tls_urls(secured_pulsar: SecuredStack) -> None:
    settings = (
        f"brokerClientAuthenticationPlugin={TLS_PLUGIN}\n"
        "brokerClientAuthenticationParameters="
        f"tlsCertFile:{secured_pulsar.client_cert},tlsKeyFile:{secured_pulsar.client_key}\n"
    )
    config = gateway_config(secured_pulsar, "default", settings, web_url="http://127.0.0.1:8080")
    message = await startup_error(config)
    assert "brokerWebServiceURL https://" in message


async def test_a_client_certificate_the_broker_does_not_trust(
    secured_pulsar: SecuredStack, tmp_path: Path
) -> None:
    """A certificate and key that match, but are not signed by the broker's trusted CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gateway-client")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "client.crt", tmp_path / "client.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    settings = (
        f"brokerClientAuthenticationPlugin={TLS_PLUGIN}\n"
        f'brokerClientAuthenticationParameters={{"tlsCertFile": "{cert_file}", '
        f'"tlsKeyFile": "{key_file}"}}\n'
        f"brokerClientTrustCertsFilePath={secured_pulsar.ca_cert}\n"
    )
    message = await startup_error(gateway_config(secured_pulsar, "default", settings))
    assert message.startswith(
        "Pulsar refused the gateway's client certificate in the TLS handshake at "
        f"{secured_pulsar.web_url} (certificate unknown): check the client certificate in "
        "brokerClientAuthenticationParameters"
    )


async def test_the_binary_check_tries_every_broker_of_the_url(
    secured_pulsar: SecuredStack,
) -> None:
    """As pulsar-client does, a broker that does not answer is skipped for the next one."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = unused.getsockname()[1]  # nothing listens there once closed
    access = BrokerAccess(
        f"pulsar+ssl://127.0.0.1:{dead},127.0.0.1:{secured_pulsar.broker_port}",
        secured_pulsar.web_url,
        auth_kind="token",
        trust_certs_file=secured_pulsar.ca_cert,
    )
    await check_binary(access, Credentials(token=secured_pulsar.superuser_token))
    only_dead = BrokerAccess(f"pulsar+ssl://127.0.0.1:{dead}", secured_pulsar.web_url)
    with pytest.raises(BrokerAccessError, match="cannot connect to the Pulsar broker"):
        await check_binary(only_dead, Credentials(token=secured_pulsar.superuser_token))
