"""The TLS configuration keys read into ``TlsSettings`` (what the amqps listeners need)."""

from __future__ import annotations

from dataclasses import replace

from gateway.auth.tls_context import ClientCertificates, TlsSettings
from gateway.config import GatewayConfig

__all__ = ["certificate_settings_for", "client_certificates_for", "tls_settings_for"]


def client_certificates_for(config: GatewayConfig) -> ClientCertificates:
    """Whether amqps listeners ask for (or require) a client certificate.

    Asked for whenever trusted CAs are configured (which EXTERNAL needs, config/loading.py checks);
    required with tlsRequireTrustedClientCertOnConnect, which wins over
    tlsAllowInsecureConnection (the stricter of two contradictory keys). With
    tlsAllowInsecureConnection alone, none is asked for: see tls_context.py for why.
    """
    has_trust = bool(
        config.tlsTrustCertsFilePath or (config.tlsEnabledWithKeyStore and config.tlsTrustStore)
    )
    if config.tlsRequireTrustedClientCertOnConnect:
        return ClientCertificates.REQUIRED
    if config.tlsAllowInsecureConnection or not has_trust:
        return ClientCertificates.NONE
    return ClientCertificates.OPTIONAL


def certificate_settings_for(config: GatewayConfig) -> TlsSettings:
    """The amqps listeners' certificate, protocols and ciphers, asking for no client
    certificate (what the management API's https listener serves too: its users log in with
    HTTP basic credentials). With tlsEnabledWithKeyStore the PKCS#12 key store replaces the
    PEM files."""
    stores = config.tlsEnabledWithKeyStore
    return TlsSettings(
        certificate_file="" if stores else config.tlsCertificateFilePath,
        key_file="" if stores else config.tlsKeyFilePath,
        key_store=config.tlsKeyStore if stores else "",
        key_store_password=config.tlsKeyStorePassword if stores else "",
        protocols=config.tlsProtocols,
        ciphers=config.tlsCiphers,
        client_certificates=ClientCertificates.NONE,
    )


def tls_settings_for(config: GatewayConfig) -> TlsSettings | None:
    """None when no listener is amqps. With tlsEnabledWithKeyStore the PKCS#12 stores replace
    the PEM files (the trust store only if set: tlsTrustCertsFilePath is the fallback)."""
    if not config.tls_listeners:
        return None
    stores = config.tlsEnabledWithKeyStore
    return replace(
        certificate_settings_for(config),
        trust_certs_file=config.tlsTrustCertsFilePath,
        trust_store=config.tlsTrustStore if stores else "",
        trust_store_password=config.tlsTrustStorePassword if stores else "",
        client_certificates=client_certificates_for(config),
        refresh_interval=float(config.tlsCertRefreshCheckDurationSec),
    )
