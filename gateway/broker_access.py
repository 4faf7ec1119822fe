"""The broker-client keys of the configuration as the Pulsar layer takes them.

The gateway (``app.py``), the ``vhosts`` command and the rollup job (``rollup/settings.py``)
all reach the brokers with these keys; this module sits beside them, on the configuration and
the Pulsar layer only, so none of them imports another to resolve its credentials.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace

from gateway.config import GatewayConfig
from gateway.pulsar.credentials import TRUST_STORE_KEY, BrokerAccess, trust_store_as_pem_file

__all__ = ["broker_access", "broker_access_with_trust_file"]


def broker_access(config: GatewayConfig) -> BrokerAccess:
    """The broker-client keys of ``config`` (reference/002, third table), for both clients."""
    params_key = (
        "amqpBrokerClientAuthenticationParameters"
        if config.amqpBrokerClientAuthenticationParameters
        else "brokerClientAuthenticationParameters"
    )
    return BrokerAccess(
        service_url=config.brokerServiceURL,
        web_url=config.brokerWebServiceURL,
        auth_kind=config.broker_client_auth_kind,
        auth_params=config.effective_broker_client_authentication_parameters,
        params_key=params_key,
        trust_certs_file=config.brokerClientTrustCertsFilePath,
        verify_hostname=config.tlsHostnameVerificationEnabled,
        # As in Pulsar's own broker client, this key also lets the gateway accept a broker
        # certificate it cannot verify (reference/002 has no broker-side twin of it).
        allow_insecure=config.tlsAllowInsecureConnection,
    )


def broker_access_with_trust_file(config: GatewayConfig, files: ExitStack) -> BrokerAccess:
    """:func:`broker_access`, with a PKCS#12 trust store (brokerClientTlsEnabledWithKeyStore)
    turned into a PEM file that ``files`` removes on exit: the clients read trust from PEM
    only. Raises ``CredentialsError`` if the store cannot be opened."""
    access = broker_access(config)
    if config.brokerClientTlsEnabledWithKeyStore:
        pem = files.enter_context(
            trust_store_as_pem_file(
                config.brokerClientTlsTrustStore, config.brokerClientTlsTrustStorePassword
            )
        )
        access = replace(access, trust_certs_file=pem, trust_key=TRUST_STORE_KEY)
    return access
