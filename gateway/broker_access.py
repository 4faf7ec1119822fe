"""The broker-client keys of the configuration as the Pulsar layer takes them.

The gateway (``app.py``), the ``vhosts`` command and the rollup job (``rollup/settings.py``)
all reach the brokers with these keys; this module sits beside them, on the configuration and
the Pulsar layer only, so none of them imports another to resolve its credentials.
"""

from __future__ import annotations

from gateway.config import GatewayConfig
from gateway.pulsar.credentials import BrokerAccess

__all__ = ["broker_access"]


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
