"""How the gateway authenticates to Pulsar and which broker certificates it trusts.

The gateway has two clients of Pulsar: the binary-protocol client (pulsar-client, C++) and the
admin REST client (httpx). Both are built here from one :class:`BrokerAccess`, so that they present
the same credentials and trust the same CAs: a role that may publish but whose admin calls are
refused (or the reverse) would fail in confusing ways long after start-up.

Parameters are read as the Java Pulsar client reads them, so that a configuration shared with a
Pulsar proxy or broker (brokerClientAuthenticationParameters) means the same here:

* ``AuthenticationToken``: ``token:<jwt>``, ``file:///path/to/token``, ``{"token": "<jwt>"}``, or
  the bare JWT.
* ``AuthenticationTls``: ``tlsCertFile:/path/client.crt,tlsKeyFile:/path/client.key`` or the same
  keys as a JSON object; a value may also be a ``file:`` URL.

Files are read once, here, at start-up: a rotated token or certificate needs a restart (the Java
client re-reads a token file per connection; the C++ client would call back into Python from its
I/O thread to do that, which is not worth the risk for a start-up-time setting).
"""

from __future__ import annotations

import json
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

import certifi

from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import ClientOptions

PARAMETERS_KEY = "brokerClientAuthenticationParameters"
TRUST_KEY = "brokerClientTrustCertsFilePath"

# What this gateway can authenticate with; basic and oauth2 are valid Pulsar plugins (the
# configuration accepts them) but are not implemented by the gateway yet.
SUPPORTED_KINDS = ("", "token", "tls")


class CredentialsError(ValueError):
    """A broker-client setting cannot be used. The message is one line naming the key."""


@dataclass(frozen=True, slots=True)
class BrokerAccess:
    """The broker-client settings, as configured (nothing read from disk yet)."""

    service_url: str
    web_url: str
    # "", "token", "tls", "basic" or "oauth2" (GatewayConfig.broker_client_auth_kind).
    auth_kind: str = ""
    auth_params: str = ""
    # The configuration key auth_params came from, to name it in errors: the gateway's own
    # amqpBrokerClientAuthenticationParameters overrides brokerClientAuthenticationParameters.
    params_key: str = PARAMETERS_KEY
    trust_certs_file: str = ""
    # The configuration key trust_certs_file came from (a PEM file made from a PKCS#12 trust
    # store stands for brokerClientTlsTrustStore).
    trust_key: str = TRUST_KEY
    verify_hostname: bool = False
    # Accept a broker certificate that cannot be verified (tlsAllowInsecureConnection).
    allow_insecure: bool = False

    @property
    def binary_tls(self) -> bool:
        return self.service_url.lower().startswith("pulsar+ssl://")

    @property
    def web_tls(self) -> bool:
        return self.web_url.lower().startswith("https://")


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the gateway presents to Pulsar: a JWT, or a client certificate and its key."""

    token: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @property
    def kind(self) -> str:
        if self.token is not None:
            return "token"
        return "tls" if self.cert_file else ""


# ------------------------------------------------------------------------------ parameters


def _path_from(value: str, what: str) -> str:
    """A local path from a plain path or a ``file:`` URL (as Java's ``URI.create`` reads it)."""
    if not value.lower().startswith("file:"):
        return value
    parts = urlsplit(value)
    if parts.netloc not in ("", "localhost"):
        raise CredentialsError(
            f"{what}: {value!r} names host {parts.netloc!r}; use file:///absolute/path"
        )
    if not parts.path:
        raise CredentialsError(f"{what}: {value!r} names no file")
    return unquote(parts.path)


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise CredentialsError(f"cannot read {what} {path}: {reason}") from None


def token_from_params(params: str, key: str = PARAMETERS_KEY) -> str:
    """The JWT that ``AuthenticationToken`` parameters stand for (reading a token file)."""
    text = params.strip()
    if text.startswith("token:"):
        token = text[len("token:") :]
    elif text.lower().startswith("file:"):
        path = _path_from(text, key)
        token = _read_text(path, f"the token file named by {key},")
    elif text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as error:
            raise CredentialsError(f"{key}: not valid JSON ({error})") from None
        if not isinstance(data, dict) or not isinstance(data.get("token"), str):
            raise CredentialsError(f'{key}: the JSON form is {{"token": "<jwt>"}}')
        token = data["token"]
    else:
        token = text
    token = token.strip()
    if not token:
        raise CredentialsError(f"{key}: the token is empty")
    if any(ch.isspace() for ch in token):
        raise CredentialsError(f"{key}: the token contains white space")
    return token


def key_values(params: str, key: str = PARAMETERS_KEY) -> dict[str, str]:
    """Pulsar's two forms of plugin parameters: a JSON object, or ``k1:v1,k2:v2`` (a value keeps
    any further colons, as in ``tlsCertFile:file:///x``)."""
    text = params.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as error:
            raise CredentialsError(f"{key}: not valid JSON ({error})") from None
        if not isinstance(data, dict):
            raise CredentialsError(f"{key}: the JSON form must be an object")
        return {str(k): str(v) for k, v in data.items()}
    pairs: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, colon, value = item.partition(":")
        if not colon:
            raise CredentialsError(f"{key}: {item.strip()!r} is not name:value")
        pairs[name.strip()] = value.strip()
    return pairs


def tls_files_from_params(params: str, key: str = PARAMETERS_KEY) -> tuple[str, str]:
    """(certificate file, key file) from ``AuthenticationTls`` parameters."""
    pairs = key_values(params, key)
    missing = [name for name in ("tlsCertFile", "tlsKeyFile") if not pairs.get(name)]
    if missing:
        raise CredentialsError(
            f"{key}: AuthenticationTls needs {' and '.join(missing)} "
            "(tlsCertFile:/path/client.crt,tlsKeyFile:/path/client.key)"
        )
    cert = _path_from(pairs["tlsCertFile"], key)
    private_key = _path_from(pairs["tlsKeyFile"], key)
    for name, value in (("tlsCertFile", cert), ("tlsKeyFile", private_key)):
        if value.lower().startswith("data:"):
            raise CredentialsError(f"{key}: {name} as a data: URL is not supported; give a file")
    return cert, private_key


def load_credentials(access: BrokerAccess) -> Credentials:
    """Read and check what ``access`` says the gateway presents; CredentialsError if unusable."""
    kind, key = access.auth_kind, access.params_key
    if kind not in SUPPORTED_KINDS:
        raise CredentialsError(
            f"brokerClientAuthenticationPlugin={kind} is not supported by the gateway yet: "
            "use token (AuthenticationToken) or tls (AuthenticationTls)"
        )
    if kind == "token":
        return Credentials(token=token_from_params(access.auth_params, key))
    if kind == "tls":
        if not (access.binary_tls and access.web_tls):
            raise CredentialsError(
                "brokerClientAuthenticationPlugin=tls authenticates with a TLS client "
                "certificate: brokerServiceURL must be pulsar+ssl:// and brokerWebServiceURL "
                "https://"
            )
        cert, private_key = tls_files_from_params(access.auth_params, key)
        try:
            # Fails now, naming the files, rather than at the first TLS handshake.
            ssl.create_default_context().load_cert_chain(cert, private_key)
        except (OSError, ssl.SSLError) as error:
            raise CredentialsError(
                f"{key}: cannot load the client certificate {cert} with key {private_key}: "
                f"{_ssl_reason(error)}"
            ) from None
        return Credentials(cert_file=cert, key_file=private_key)
    return Credentials()


def _ssl_reason(error: BaseException) -> str:
    if isinstance(error, ssl.SSLError) and error.reason:
        return str(error.reason).replace("_", " ").lower()
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


# ------------------------------------------------------------------------------ trust stores

TRUST_STORE_KEY = "brokerClientTlsTrustStore"


def trust_store_pem(path: str, password: str) -> bytes:
    """The CA certificates of a PKCS#12 trust store (``keytool -storetype PKCS12`` makes them
    too), as PEM: the form both clients read (brokerClientTlsEnabledWithKeyStore)."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CredentialsError(f"cannot read {TRUST_STORE_KEY} {path}: {error.strerror}") from None
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError:
        raise CredentialsError(
            f"cannot open {TRUST_STORE_KEY} {path}: not a PKCS#12 file, or "
            "brokerClientTlsTrustStorePassword is wrong"
        ) from None
    certificates = [store.cert] if store.cert is not None else []
    certificates += store.additional_certs
    if not certificates:
        raise CredentialsError(f"{TRUST_STORE_KEY} {path} holds no certificates")
    return b"".join(entry.certificate.public_bytes(Encoding.PEM) for entry in certificates)


@contextmanager
def trust_store_as_pem_file(path: str, password: str) -> Iterator[str]:
    """A private PEM file with the trust store's CAs, for the life of the block: pulsar-client
    reads its trust file at every new connection, so the file must outlive start-up."""
    pem = trust_store_pem(path, password)
    descriptor, name = tempfile.mkstemp(prefix="starlight-broker-trust-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(pem)
        yield name
    finally:
        with suppress(OSError):
            os.unlink(name)


# ------------------------------------------------------------------------------ the clients


def trust_file(access: BrokerAccess) -> str:
    """The CA file both clients trust for the brokers, checked. Without brokerClientTrustCerts-
    FilePath it is certifi's bundle, which pulsar-client falls back to (and httpx too)."""
    if not access.trust_certs_file:
        return certifi.where()
    path = _path_from(access.trust_certs_file, access.trust_key)
    if access.binary_tls or access.web_tls:
        try:
            ssl.create_default_context(cafile=path)
        except (OSError, ssl.SSLError) as error:
            raise CredentialsError(
                f"cannot load {access.trust_key} {path}: {_ssl_reason(error)} (a PEM file of CA "
                "certificates is expected)"
            ) from None
    return path


def ssl_context(access: BrokerAccess, credentials: Credentials) -> ssl.SSLContext:
    """Python's equivalent of the binary client's TLS settings (for the admin client, and for
    diagnosing a failed handshake)."""
    context = ssl.create_default_context(cafile=trust_file(access))
    # Pulsar's clients verify the certificate chain always, and the host name only when asked
    # (tlsHostnameVerificationEnabled, off by default); Python's default checks both.
    context.check_hostname = access.verify_hostname and not access.allow_insecure
    if access.allow_insecure:
        context.verify_mode = ssl.CERT_NONE
    if credentials.cert_file and credentials.key_file:
        context.load_cert_chain(credentials.cert_file, credentials.key_file)
    return context


def admin_ssl_context(access: BrokerAccess, credentials: Credentials) -> ssl.SSLContext | None:
    """The TLS settings of the admin client, matching the binary client's; None over http."""
    return ssl_context(access, credentials) if access.web_tls else None


def client_options(
    access: BrokerAccess, credentials: Credentials, base: ClientOptions | None = None
) -> ClientOptions:
    """``base`` (threads, timeouts) with the URL, TLS and authentication of ``access``."""
    return replace(
        base or ClientOptions(),
        service_url=access.service_url,
        auth_token=credentials.token,
        tls_trust_certs_file_path=trust_file(access) if access.binary_tls else None,
        tls_allow_insecure_connection=access.allow_insecure,
        tls_validate_hostname=access.verify_hostname,
        tls_certificate_file_path=credentials.cert_file,
        tls_private_key_file_path=credentials.key_file,
        auth_tls=credentials.kind == "tls",
    )


def admin_client(access: BrokerAccess, credentials: Credentials) -> PulsarAdmin:
    """The admin REST client, with the same credentials and trust as the binary client: a
    ``Authorization: Bearer`` header for a token, the client certificate for TLS."""
    return PulsarAdmin(
        access.web_url,
        auth_token=credentials.token,
        tls=admin_ssl_context(access, credentials),
    )
