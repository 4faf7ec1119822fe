"""TLS keys (reference/002, fourth table): the amqps listeners' certificates and trust."""

from __future__ import annotations

from dataclasses import dataclass, field

from gateway.config.keys import PKCS12_ONLY, Kind, Section, key_metadata
from gateway.config.schema.broker_client import BrokerClientKeys

# Every key of this module is in one section of the documentation.
_TLS = Section.TLS


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TlsKeys(BrokerClientKeys):
    """One section of :class:`~gateway.config.schema.GatewayConfig`, in documentation order."""

    # ---- TLS (reference/002, fourth table) ----------------------------------------------
    tlsCertRefreshCheckDurationSec: int = field(
        metadata=key_metadata(
            Kind.INT,
            "300",
            """How often, in seconds, the certificate and key files are checked for changes
            and reloaded. 0: check on every new connection.""",
            _TLS,
            minimum=0,
        )
    )
    tlsCertificateFilePath: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "PEM certificate (chain) presented by the amqps listeners.",
            _TLS,
        )
    )
    tlsKeyFilePath: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "PEM private key of tlsCertificateFilePath.",
            _TLS,
        )
    )
    tlsTrustCertsFilePath: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            """PEM file of the CA certificates trusted for client certificates (needed by
            EXTERNAL and by tlsRequireTrustedClientCertOnConnect).""",
            _TLS,
        )
    )
    tlsAllowInsecureConnection: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Let clients connect whatever client certificate they hold: none is requested,
            so none is used for authentication (EXTERNAL is refused). Python's TLS cannot ask
            for a certificate and then accept one it cannot verify. Also accepts a Pulsar
            broker certificate that cannot be verified (with a warning at start-up).""",
            _TLS,
        )
    )
    tlsHostnameVerificationEnabled: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Verify the brokers' host names against their certificates when the gateway
            connects to Pulsar with TLS.""",
            _TLS,
        )
    )
    tlsRequireTrustedClientCertOnConnect: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Require a client certificate signed by a trusted CA on amqps connections;
            connections without one are rejected.""",
            _TLS,
        )
    )
    tlsProtocols: tuple[str, ...] = field(
        metadata=key_metadata(
            Kind.TLS_PROTOCOLS,
            "",
            """TLS versions allowed on the amqps listeners, comma-separated: TLSv1.3,
            TLSv1.2 (TLSv1.1 and TLSv1 only where Python's ssl module still supports them).
            Empty: Python's defaults.""",
            _TLS,
        )
    )
    tlsCiphers: tuple[str, ...] = field(
        metadata=key_metadata(
            Kind.TLS_CIPHERS,
            "",
            """Cipher suites allowed on the amqps listeners, comma-separated, e.g.
            TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256. Empty: Python's defaults. Only the form of
            each name is checked here.""",
            _TLS,
        )
    )
    tlsEnabledWithKeyStore: bool = field(
        metadata=key_metadata(
            Kind.BOOL,
            "false",
            """Read the listeners' certificate and key from tlsKeyStore and the trusted client
            CAs from tlsTrustStore, instead of the PEM file paths.""",
            _TLS,
        )
    )
    tlsProvider: str = field(
        metadata=key_metadata(
            Kind.TLS_PROVIDER,
            "",
            """TLS provider. Python always uses the OpenSSL library of its ssl module, so only
            empty, JDK or OpenSSL are accepted, and all three mean that.""",
            _TLS,
        )
    )
    tlsKeyStoreType: str = field(
        metadata=key_metadata(
            Kind.STORE_TYPE,
            "PKCS12",
            "Type of tlsKeyStore. " + PKCS12_ONLY,
            _TLS,
        )
    )
    tlsKeyStore: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "Path of the PKCS#12 key store with the listeners' certificate and private key.",
            _TLS,
        )
    )
    tlsKeyStorePassword: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "Password of tlsKeyStore.",
            _TLS,
            secret=True,
        )
    )
    tlsTrustStoreType: str = field(
        metadata=key_metadata(
            Kind.STORE_TYPE,
            "PKCS12",
            "Type of tlsTrustStore. " + PKCS12_ONLY,
            _TLS,
        )
    )
    tlsTrustStore: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "Path of the PKCS#12 trust store with the CAs trusted for client certificates.",
            _TLS,
        )
    )
    tlsTrustStorePassword: str = field(
        metadata=key_metadata(
            Kind.STRING,
            "",
            "Password of tlsTrustStore.",
            _TLS,
            secret=True,
        )
    )
