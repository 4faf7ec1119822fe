"""The server-side ``ssl.SSLContext`` of the amqps listeners, built from the TLS keys.

Client certificates (``ClientCertificates``):

* ``REQUIRED`` (tlsRequireTrustedClientCertOnConnect): a client without a certificate signed by
  a trusted CA fails the TLS handshake.
* ``OPTIONAL`` (trusted CAs configured, e.g. for EXTERNAL): the server asks for a certificate; a
  client may send none, but one it sends must verify, or the handshake fails (OpenSSL's
  SSL_VERIFY_PEER without FAIL_IF_NO_PEER_CERT, like RabbitMQ's verify_peer with
  fail_if_no_peer_cert=false).
* ``NONE``: no certificate is asked for. tlsAllowInsecureConnection=true lands here: Python's
  ssl has no verify callback, so it cannot ask for a certificate and then accept one that does
  not verify; not asking is the only way to let every client in, and no certificate is then
  used for authentication (docs/security.md).

``tlsProtocols`` becomes the range from the oldest to the newest version listed (OpenSSL sets a
range, not a set). ``tlsCiphers`` goes through ``cipher_names``; every name must be known to
this OpenSSL, or start-up fails naming it. As in Java, listing no TLS 1.3 suite disables TLS 1.3
and listing only TLS 1.3 suites disables TLS 1.2 and older.

Everything wrong is a ``ConfigError`` naming the configuration key, on one line.
"""

from __future__ import annotations

import enum
import ssl
from dataclasses import dataclass, field
from typing import Final

from gateway.auth.cipher_names import plan_ciphers
from gateway.auth.key_files import read_file
from gateway.auth.tls_stores import load_key_store, load_trust_store
from gateway.config import ConfigError

__all__ = ["ClientCertificates", "TlsSettings", "build_server_context"]

_VERSIONS: Final = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class ClientCertificates(enum.Enum):
    NONE = "none"
    OPTIONAL = "optional"
    REQUIRED = "required"


@dataclass(frozen=True)
class TlsSettings:
    """What the amqps listeners need, in the configuration's terms (see ``app.server_settings``).

    The certificate comes from ``key_store`` when it is set (tlsEnabledWithKeyStore), else from
    the two PEM files; the trusted CAs from ``trust_store`` when set, else ``trust_certs_file``.
    """

    certificate_file: str = ""
    key_file: str = ""
    key_store: str = ""
    key_store_password: str = field(default="", repr=False)
    trust_certs_file: str = ""
    trust_store: str = ""
    trust_store_password: str = field(default="", repr=False)
    protocols: tuple[str, ...] = ()
    ciphers: tuple[str, ...] = ()
    client_certificates: ClientCertificates = ClientCertificates.NONE
    #: tlsCertRefreshCheckDurationSec: how often the files are checked for changes (0: on
    #: every new connection).
    refresh_interval: float = 300.0

    @property
    def files(self) -> tuple[str, ...]:
        """The files the context is built from, watched for replacement."""
        paths = [self.key_store] if self.key_store else [self.certificate_file, self.key_file]
        if self.client_certificates is not ClientCertificates.NONE:
            paths.append(self.trust_store or self.trust_certs_file)
        return tuple(path for path in paths if path)


def build_server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A fresh context from the files as they are now; ``ConfigError`` if they do not do."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_certificate(context, settings)
    _set_client_certificates(context, settings)
    _set_versions_and_ciphers(context, settings)
    return context


def _load_certificate(context: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.key_store:
        load_key_store(context, settings.key_store, settings.key_store_password)
        return
    if not (settings.certificate_file and settings.key_file):
        raise ConfigError(
            "tlsCertificateFilePath: an amqps listener needs tlsCertificateFilePath and "
            "tlsKeyFilePath (or tlsEnabledWithKeyStore=true and tlsKeyStore)",
            key="tlsCertificateFilePath",
        )
    # Read first, for a clear message when a file is missing (ssl's is "[Errno 2]").
    read_file(settings.certificate_file, "tlsCertificateFilePath", "the certificate")
    key = read_file(settings.key_file, "tlsKeyFilePath", "the private key")
    if b"ENCRYPTED" in key:
        raise ConfigError(
            f"tlsKeyFilePath: {settings.key_file} is encrypted; there is no password key for a "
            "PEM key file: decrypt it (openssl pkey -in key.pem -out plain.pem) or use a "
            "PKCS#12 key store with tlsKeyStorePassword",
            key="tlsKeyFilePath",
        )
    try:
        # The password callback matters: without one, OpenSSL prompts on the terminal for an
        # encrypted key and blocks the whole process.
        context.load_cert_chain(settings.certificate_file, settings.key_file, password=_no_password)
    except ssl.SSLError as error:
        raise ConfigError(
            f"tlsCertificateFilePath: cannot use {settings.certificate_file} with "
            f"{settings.key_file}: {_ssl_reason(error)}",
            key="tlsCertificateFilePath",
        ) from None


def _no_password() -> bytes:
    raise ValueError("the key is encrypted")


def _set_client_certificates(context: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.client_certificates is ClientCertificates.NONE:
        context.verify_mode = ssl.CERT_NONE
        return
    if settings.trust_store:
        load_trust_store(context, settings.trust_store, settings.trust_store_password)
    elif settings.trust_certs_file:
        read_file(settings.trust_certs_file, "tlsTrustCertsFilePath", "the trusted CAs")
        try:
            context.load_verify_locations(cafile=settings.trust_certs_file)
        except ssl.SSLError as error:
            raise ConfigError(
                f"tlsTrustCertsFilePath: cannot load {settings.trust_certs_file}: "
                f"{_ssl_reason(error)}",
                key="tlsTrustCertsFilePath",
            ) from None
    else:
        raise ConfigError(
            "tlsTrustCertsFilePath: client certificates are asked for but no trusted CAs are set",
            key="tlsTrustCertsFilePath",
        )
    if settings.client_certificates is ClientCertificates.REQUIRED:
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_OPTIONAL


def _set_versions_and_ciphers(context: ssl.SSLContext, settings: TlsSettings) -> None:
    versions = [_VERSIONS[name] for name in settings.protocols if name in _VERSIONS]
    if versions:
        context.minimum_version = min(versions)
        context.maximum_version = max(versions)
    if not settings.ciphers:
        return
    plan = plan_ciphers(settings.ciphers)
    known13 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"}
    for name in plan.tls13:
        if name not in known13:
            raise ConfigError(
                f"tlsCiphers: {name} is not available in this OpenSSL (TLS 1.3 suites: "
                f"{', '.join(sorted(known13)) or 'none'})",
                key="tlsCiphers",
            )
    for original, name in zip(
        [n for n in settings.ciphers if n not in plan.tls13], plan.tls12, strict=True
    ):
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
        except ssl.SSLError:
            raise ConfigError(
                f"tlsCiphers: {original} is not a cipher suite this OpenSSL supports"
                + (f" (as {name})" if name != original else ""),
                key="tlsCiphers",
            ) from None
    if plan.tls12:
        context.set_ciphers(":".join(plan.tls12))
    _restrict_versions(context, tls12=bool(plan.tls12), tls13=bool(plan.tls13))


def _restrict_versions(context: ssl.SSLContext, *, tls12: bool, tls13: bool) -> None:
    """A TLS generation none of whose suites is listed cannot be negotiated (Java's rule)."""
    if not tls13:
        if context.minimum_version > ssl.TLSVersion.TLSv1_2:
            raise ConfigError(
                "tlsCiphers: lists no TLS 1.3 suite but tlsProtocols allows only TLSv1.3",
                key="tlsCiphers",
            )
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    if not tls12:
        if context.maximum_version not in (
            ssl.TLSVersion.MAXIMUM_SUPPORTED,
            ssl.TLSVersion.TLSv1_3,
        ):
            raise ConfigError(
                "tlsCiphers: lists only TLS 1.3 suites but tlsProtocols does not allow TLSv1.3",
                key="tlsCiphers",
            )
        context.minimum_version = ssl.TLSVersion.TLSv1_3


def _ssl_reason(error: ssl.SSLError) -> str:
    """OpenSSL's reason (``KEY_VALUES_MISMATCH``) rather than ``[SSL] PEM lib (_ssl.c:3900)``."""
    reason = error.reason or ""
    text = str(error.args[1] if len(error.args) > 1 else error)
    return f"{reason.lower().replace('_', ' ')} ({text})" if reason else text
