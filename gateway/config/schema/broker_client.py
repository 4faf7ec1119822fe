"""Broker client keys (reference/002, third table): how the gateway reaches Pulsar."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import PKCS12_ONLY, Kind, Section, key_metadata
from gateway.config.schema.authentication import AuthenticationKeys

# Every key of this module is in one section of the documentation.
_BC = Section.BROKER_CLIENT


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BrokerClientKeys(AuthenticationKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- Broker client (reference/002, third table) -------------------------------------
    brokerServiceURL: str = field(
        metadata=key_metadata(
            Kind.PULSAR_URL,
            "",
            """Pulsar binary-protocol URL of the brokers (or a Pulsar proxy):
            `pulsar://host:6650` or `pulsar+ssl://host:6651`, several hosts
            comma-separated.""",
            _BC,
            required=True,
        )
    )
    brokerWebServiceURL: str = field(
        metadata=key_metadata(
            Kind.WEB_URL,
            "",
            """Pulsar admin REST URL of the brokers: `http://host:8080` or
            `https://host:8443`, several hosts comma-separated (`http://b1:8080,b2:8080`: one
            serves until it fails, then the next).""",
            _BC,
            required=True,
        )
    )
    brokerClientAuthenticationPlugin: str = field(
        metadata=key_metadata(
            Kind.AUTH_PLUGIN,
            "",
            """How the gateway authenticates to Pulsar: a Pulsar client authentication class
            (`org.apache.pulsar.client.impl.auth.AuthenticationToken`, `...AuthenticationTls`,
            `...AuthenticationBasic`, `...oauth2.AuthenticationOAuth2`) or the short name
            token, tls, basic or oauth2. Empty: no authentication.""",
            _BC,
        )
    )
    brokerClientAuthenticationParameters: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """Parameters of brokerClientAuthenticationPlugin in the Pulsar client's string
            form, e.g. `token:<jwt>` or `file:///path/to/token`.""",
            _BC,
            secret=True,
        )
    )
    amqpBrokerClientAuthenticationParameters: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """If set, used instead of brokerClientAuthenticationParameters, so that the
            gateway can have its own credentials when it shares a configuration file with a
            Pulsar proxy.""",
            _BC,
            secret=True,
        )
    )
    tlsEnabledWithBroker: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Use TLS to the brokers. Requires `pulsar+ssl://` and `https://` URLs (a
            `pulsar+ssl://` URL uses TLS whatever this says).""",
            _BC,
        )
    )
    brokerClientTrustCertsFilePath: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """PEM file of the CA certificates trusted for the brokers' TLS certificates (binary
            protocol and admin API). Empty: certifi's CA bundle.""",
            _BC,
        )
    )
    brokerClientTlsEnabledWithKeyStore: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Read the brokers' trusted CAs from brokerClientTlsTrustStore instead of
            brokerClientTrustCertsFilePath.""",
            _BC,
        )
    )
    brokerClientTlsTrustStoreType: str = field(
        metadata=key_metadata(
            Kind.STORE_TYPE,
            "PKCS12",
            "Type of brokerClientTlsTrustStore. " + PKCS12_ONLY,
            _BC,
        )
    )
    brokerClientTlsTrustStore: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "Path of the PKCS#12 trust store with the CAs trusted for the brokers.",
            _BC,
        )
    )
    brokerClientTlsTrustStorePassword: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "Password of brokerClientTlsTrustStore.",
            _BC,
            secret=True,
        )
    )
