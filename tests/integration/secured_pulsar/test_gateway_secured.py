"""The gateway publishing and consuming through a Pulsar that wants TLS and authentication.

Every gateway here talks to the secured profile's TLS-only ports (pulsar+ssl://, https://), so a
message that arrives proves both clients (binary protocol and admin API) carried the
credentials and trusted the profile's CA.
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pika
import pytest
import trio

from gateway.config import GatewayConfig
from tests.integration.secured_pulsar.support import (
    TLS_PLUGIN,
    SecuredStack,
    confirmed_round_trip,
    forwarded,
    gateway_config,
    token_settings,
)
from tests.support.clients import connect
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, forget_metadata

pytestmark = pytest.mark.integration


def run_round_trip(config: GatewayConfig) -> list[bytes]:
    with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
        return confirmed_round_trip(gateway.port)


EXPECTED = [f"message {i} over TLS".encode() for i in range(5)]


def test_token_authentication_over_tls(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    config = gateway_config(
        secured_pulsar, secured_namespace, settings + "tlsEnabledWithBroker=true\n"
    )
    assert run_round_trip(config) == EXPECTED


def test_tls_client_certificate_authentication(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    settings = (
        f"brokerClientAuthenticationPlugin={TLS_PLUGIN}\n"
        "brokerClientAuthenticationParameters="
        f"tlsCertFile:{secured_pulsar.client_cert},tlsKeyFile:{secured_pulsar.client_key}\n"
        f"brokerClientTrustCertsFilePath={secured_pulsar.ca_cert}\n"
    )
    config = gateway_config(secured_pulsar, secured_namespace, settings)
    assert run_round_trip(config) == EXPECTED


def test_gateway_parameters_override_the_shared_ones(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    """A configuration shared with a Pulsar proxy: its parameters (here a token Pulsar refuses)
    give way to amqpBrokerClientAuthenticationParameters (a token file)."""
    settings = token_settings(secured_pulsar, "token:not-a-valid-jwt") + (
        f"amqpBrokerClientAuthenticationParameters=file://{secured_pulsar.superuser_token_file}\n"
    )
    config = gateway_config(secured_pulsar, secured_namespace, settings)
    assert (
        run_round_trip(
            config,
        )
        == EXPECTED
    )


def test_hostname_verification_accepts_a_name_the_certificate_lists(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    config = gateway_config(
        secured_pulsar,
        secured_namespace,
        settings + "tlsHostnameVerificationEnabled=true\n",
        broker_url=f"pulsar+ssl://localhost:{secured_pulsar.broker_port}",
        web_url=f"https://localhost:{secured_pulsar.web_port}",
    )
    assert run_round_trip(config) == EXPECTED


def test_without_hostname_verification_another_address_works(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    """127.0.0.2 is not in the broker's certificate; by default (as in Pulsar's clients) only
    the chain is verified, so the gateway connects."""
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    with forwarded(secured_pulsar) as (broker_url, web_url):
        config = gateway_config(
            secured_pulsar, secured_namespace, settings, broker_url=broker_url, web_url=web_url
        )
        assert run_round_trip(config) == EXPECTED


def test_a_role_without_permissions_is_refused_by_pulsar(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    """Authentication succeeds (the gateway starts: any authenticated role may), but Pulsar's
    authorization refuses the role the namespace: the AMQP client is refused the vhost with
    530 NOT_ALLOWED, as RabbitMQ refuses a vhost the user has no permissions for."""
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.user_token}")
    config = gateway_config(secured_pulsar, secured_namespace, settings)
    with (
        GatewayInThread(backend_factory=backend_factory(config)) as gateway,
        pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused,
    ):
        connect(gateway.port)
    assert "530" in str(refused.value)
    assert "NOT_ALLOWED" in str(refused.value)
    assert "Unauthorized" in str(refused.value)  # Pulsar's reason is passed on


def test_a_tenant_admin_role_is_enough(secured_pulsar: SecuredStack) -> None:
    """The least the gateway's role needs: to be an admin of the tenant its vhosts map to (the
    gateway reads namespace policies and manages subscriptions), not a superuser."""
    tenant = f"t-admin-{uuid.uuid4().hex[:8]}"
    with secured_pulsar.admin_http() as admin:
        admin.put(
            f"/admin/v2/tenants/{tenant}",
            json={"adminRoles": [secured_pulsar.user_role], "allowedClusters": ["standalone"]},
        ).raise_for_status()
        admin.put(f"/admin/v2/namespaces/{tenant}/vhost").raise_for_status()
        try:
            settings = token_settings(secured_pulsar, f"token:{secured_pulsar.user_token}")
            config = gateway_config(
                secured_pulsar, "vhost", settings + f"amqpDefaultTenant={tenant}\n"
            )
            assert run_round_trip(config) == EXPECTED
        finally:
            admin.delete(f"/admin/v2/namespaces/{tenant}/vhost", params={"force": "true"})
            admin.delete(f"/admin/v2/tenants/{tenant}")
            trio.run(forget_metadata, secured_pulsar.zookeeper, f"{tenant}/vhost")


def test_a_pkcs12_trust_store(
    secured_pulsar: SecuredStack, secured_namespace: str, tmp_path: Path
) -> None:
    """brokerClientTlsEnabledWithKeyStore with a trust store made by the JDK's keytool, as a
    Java Pulsar deployment would have it."""
    keytool = shutil.which("keytool")
    if keytool is None:
        pytest.skip("keytool (JDK) is not on PATH")
    store = tmp_path / "truststore.p12"
    subprocess.run(
        [keytool, "-importcert", "-noprompt", "-storetype", "PKCS12", "-keystore", str(store),
         "-storepass", "changeit", "-alias", "pulsar-ca", "-file", secured_pulsar.ca_cert],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings = settings.replace(f"brokerClientTrustCertsFilePath={secured_pulsar.ca_cert}\n", "")
    settings += (
        "brokerClientTlsEnabledWithKeyStore=true\n"
        f"brokerClientTlsTrustStore={store}\n"
        "brokerClientTlsTrustStorePassword=changeit\n"
    )
    config = gateway_config(secured_pulsar, secured_namespace, settings)
    assert run_round_trip(config) == EXPECTED


def test_insecure_connection_skips_certificate_verification(
    secured_pulsar: SecuredStack, secured_namespace: str
) -> None:
    """tlsAllowInsecureConnection=true: no trusted CA configured, the broker's certificate is
    accepted unverified by both clients (the gateway warns about it at start-up)."""
    settings = token_settings(secured_pulsar, f"token:{secured_pulsar.superuser_token}")
    settings = settings.replace(f"brokerClientTrustCertsFilePath={secured_pulsar.ca_cert}\n", "")
    config = gateway_config(
        secured_pulsar, secured_namespace, settings + "tlsAllowInsecureConnection=true\n"
    )
    assert run_round_trip(config) == EXPECTED
