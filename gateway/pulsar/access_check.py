"""Start-up checks: can the gateway use Pulsar with the credentials and TLS settings it has?

Run once before the gateway accepts AMQP connections, so that a wrong token, an untrusted broker
certificate or a wrong port ends start-up with one line naming the problem and the key to fix,
instead of every client connection failing later.

* The admin API: ``GET /admin/v2/clusters`` is open to any authenticated role, so a 401/403 there
  means the credentials themselves were refused (not a missing permission).
* The binary protocol: one CONNECT of our own (connect_probe.py) to the first broker, with the
  binary client's TLS settings and credentials. pulsar-client cannot be asked this: it retries
  refused credentials until its operation timeout and then says only "Timeout".

Authorization is not checked: a role may be allowed some namespaces and not others, and each
AMQP operation reports what Pulsar refuses (403, or 530 for a vhost).
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

import trio

from gateway.pulsar.admin import PulsarAdmin, cause_of_kind, tls_verification_failure
from gateway.pulsar.connect_probe import ProbeFailed, probe_connect
from gateway.pulsar.credentials import TRUST_KEY, BrokerAccess, Credentials, ssl_context
from gateway.pulsar.errors import AdminError, Unauthorized

PROBE_TIMEOUT = 10.0
HANDSHAKE_TIMEOUT = 10.0

# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = frozenset({62, 64})
# TLS alerts with which a server refuses the client's certificate (OpenSSL reason names).
_CLIENT_CERT_REFUSED = frozenset(
    {
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "TLSV1_ALERT_ACCESS_DENIED",
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
    }
)


class BrokerAccessError(Exception):
    """Pulsar cannot be used as configured. The message is one line: what, where, what to check."""


def _refused(access: BrokerAccess, credentials: Credentials, where: str) -> str:
    if credentials.kind == "":
        return (
            f"Pulsar requires authentication {where}: set brokerClientAuthenticationPlugin and "
            "brokerClientAuthenticationParameters"
        )
    what = "the client certificate in " if credentials.kind == "tls" else ""
    return f"Pulsar refused the gateway's credentials {where}: check {what}{access.params_key}"


def _verification_hint(access: BrokerAccess, error: ssl.SSLCertVerificationError) -> str:
    if error.verify_code in _NAME_MISMATCH:
        return (
            "the broker's certificate is not issued for that host name: use a name it lists, "
            "or set tlsHostnameVerificationEnabled=false"
        )
    if access.trust_certs_file:
        return f"check {access.trust_key} (the CA that signed the broker's certificate)"
    return f"set {TRUST_KEY} to the CA that signed the broker's certificate"


def _tls_failure(
    access: BrokerAccess, credentials: Credentials, url: str, error: ssl.SSLError
) -> str:
    if credentials.kind == "tls" and str(error.reason) in _CLIENT_CERT_REFUSED:
        reason = str(error.reason).split("ALERT_", 1)[-1].replace("_", " ").lower()
        return (
            f"Pulsar refused the gateway's client certificate in the TLS handshake at {url} "
            f"({reason}): check the client certificate in {access.params_key} (is it signed by "
            "a CA the broker trusts, its tlsTrustCertsFilePath?)"
        )
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = (error.verify_message or str(error.reason or error)).rstrip(".")
        return (
            f"the TLS handshake with Pulsar at {url} failed ({detail}): "
            f"{_verification_hint(access, error)}"
        )
    reason = str(error.reason or error).replace("_", " ").lower()
    return f"the TLS handshake with Pulsar at {url} failed ({reason}): is that port a TLS port?"


def _raise_if_tls(
    error: BaseException, access: BrokerAccess, credentials: Credentials, url: str
) -> None:
    """BrokerAccessError saying what to check, if ``error`` is a failed TLS handshake."""
    tls = tls_verification_failure(error) or cause_of_kind(error, ssl.SSLError)
    if tls is not None:
        raise BrokerAccessError(_tls_failure(access, credentials, url, tls)) from None


async def check_admin(admin: PulsarAdmin, access: BrokerAccess, credentials: Credentials) -> None:
    """The admin API answers and accepts the credentials; BrokerAccessError otherwise."""
    try:
        await admin.request("GET", "/admin/v2/clusters")
    except Unauthorized as error:
        where = f"(HTTP {error.status}) at {access.web_url}"
        raise BrokerAccessError(_refused(access, credentials, where)) from None
    except AdminError as error:
        _raise_if_tls(error, access, credentials, access.web_url)
        raise BrokerAccessError(
            f"cannot reach the Pulsar admin API at {access.web_url}: {error}"
        ) from None


def brokers(service_url: str) -> list[tuple[str, int]]:
    """(host, port) of each broker of a ``pulsar://`` or ``pulsar+ssl://`` URL
    (``pulsar://h1:6650,h2:6650``; a missing port is the scheme's default)."""
    parts = urlsplit(service_url)
    default = 6651 if parts.scheme.lower() == "pulsar+ssl" else 6650
    found = []
    for item in parts.netloc.split(","):
        item = item.strip()
        if item.startswith("["):  # [IPv6]:port
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = item.partition(":")
        if host:
            found.append((host, int(port) if port.isdigit() else default))
    return found


async def speaks_tls(host: str, port: int) -> bool:
    """Whether the port completes a TLS handshake (certificate unchecked): the diagnosis for a
    pulsar:// URL pointing at a TLS-only port, which just drops the plaintext CONNECT."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT):
            stream = await trio.open_ssl_over_tcp_stream(host, port, ssl_context=context)
            try:
                await stream.do_handshake()
            finally:
                await trio.aclose_forcefully(stream)
    except (OSError, trio.BrokenResourceError, trio.TooSlowError):
        return False
    return True


def _auth_for_connect(credentials: Credentials) -> tuple[str | None, bytes]:
    """What pulsar-client puts in CONNECT: the token itself, or nothing for TLS (the broker
    takes the role from the certificate of the TLS session)."""
    if credentials.token is not None:
        return "token", credentials.token.encode()
    if credentials.kind == "tls":
        return "tls", b""
    return None, b""


async def check_binary(access: BrokerAccess, credentials: Credentials) -> None:
    """A broker of brokerServiceURL accepts a binary-protocol connection with the credentials.

    Brokers are tried in order until one answers, as pulsar-client would; an answer (accepted
    or refused) or a failed TLS verification settles it, since every broker of a cluster has
    the same authentication and, in practice, certificates from the same CA.
    """
    method, data = _auth_for_connect(credentials)
    context = ssl_context(access, credentials) if access.binary_tls else None
    unreachable: list[tuple[str, int, ProbeFailed]] = []
    for host, port in brokers(access.service_url):
        try:
            answer = await probe_connect(
                host,
                port,
                ssl_context=context,
                auth_method=method,
                auth_data=data,
                timeout=PROBE_TIMEOUT,
            )
        except ProbeFailed as failure:
            _raise_if_tls(failure, access, credentials, access.service_url)
            unreachable.append((host, port, failure))
            continue
        if answer.connected:
            return
        detail = f" ({answer.message})" if answer.message else ""
        if answer.error == "AuthenticationError":
            raise BrokerAccessError(
                _refused(access, credentials, f"at {access.service_url}{detail}")
            )
        raise BrokerAccessError(
            f"the Pulsar broker at {access.service_url} refused the connection: "
            f"{answer.error}{detail}"
        )
    if not unreachable:
        raise BrokerAccessError(f"brokerServiceURL {access.service_url} names no broker")
    first_host, first_port, first_failure = unreachable[0]
    if not access.binary_tls and await speaks_tls(first_host, first_port):
        raise BrokerAccessError(
            f"the Pulsar broker port of {access.service_url} expects TLS: use a pulsar+ssl:// "
            "brokerServiceURL"
        )
    raise BrokerAccessError(
        f"cannot connect to the Pulsar broker at {access.service_url} ({first_failure}): check "
        "brokerServiceURL"
    )


async def check_access(admin: PulsarAdmin, access: BrokerAccess, credentials: Credentials) -> None:
    """Both of the gateway's ways into Pulsar work; BrokerAccessError naming the first that
    does not."""
    await check_admin(admin, access, credentials)
    await check_binary(access, credentials)
