"""The start-up checks' pure parts: URL parsing and the one-line messages (the hand-written
CONNECT and the broker's answers are test_connect_probe.py). No network: the admin client runs
on httpx.MockTransport."""

from __future__ import annotations

import ssl

import httpx
import pytest
import trio

from gateway.pulsar import access_check
from gateway.pulsar.access_check import (
    BrokerAccessError,
    _tls_failure,
    brokers,
    check_admin,
    check_binary,
)
from gateway.pulsar.admin import PulsarAdmin, tls_verification_failure
from gateway.pulsar.connect_probe import ProbeFailed
from gateway.pulsar.credentials import BrokerAccess, Credentials
from gateway.pulsar.errors import Unavailable
from gateway.pulsar.retry import RetryPolicy

ACCESS = BrokerAccess(
    "pulsar+ssl://broker:6651",
    "https://broker:8443",
    auth_kind="token",
    trust_certs_file="/etc/ca.pem",
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("pulsar://b:6650", [("b", 6650)]),
        ("pulsar+ssl://b1:7000,b2:7001", [("b1", 7000), ("b2", 7001)]),
        ("pulsar+ssl://b", [("b", 6651)]),
        ("pulsar://b1,b2:6660", [("b1", 6650), ("b2", 6660)]),
        ("pulsar+ssl://[::1]:6651,[fe80::1]", [("::1", 6651), ("fe80::1", 6651)]),
    ],
)
def test_brokers(url: str, expected: list[tuple[str, int]]) -> None:
    assert brokers(url) == expected


def verification_error(code: int, message: str) -> ssl.SSLCertVerificationError:
    error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
    error.verify_code = code
    error.verify_message = message
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    return error


def test_tls_failure_messages() -> None:
    url = ACCESS.web_url
    untrusted = verification_error(20, "unable to get local issuer certificate")
    assert _tls_failure(ACCESS, Credentials(token="t"), url, untrusted) == (
        f"the TLS handshake with Pulsar at {url} failed (unable to get local issuer "
        "certificate): check brokerClientTrustCertsFilePath (the CA that signed the broker's "
        "certificate)"
    )
    no_trust = BrokerAccess(ACCESS.service_url, url)
    assert _tls_failure(no_trust, Credentials(), url, untrusted).endswith(
        "set brokerClientTrustCertsFilePath to the CA that signed the broker's certificate"
    )
    mismatch = verification_error(62, "Hostname mismatch, certificate is not valid for 'b'.")
    assert _tls_failure(ACCESS, Credentials(), url, mismatch) == (
        f"the TLS handshake with Pulsar at {url} failed (Hostname mismatch, certificate is not "
        "valid for 'b'): the broker's certificate is not issued for that host name: use a name "
        "it lists, or set tlsHostnameVerificationEnabled=false"
    )
    alert = ssl.SSLError(1, "[SSL: SSLV3_ALERT_CERTIFICATE_UNKNOWN] sslv3 alert")
    alert.reason = "SSLV3_ALERT_CERTIFICATE_UNKNOWN"
    assert _tls_failure(ACCESS, Credentials(cert_file="c", key_file="k"), url, alert) == (
        f"Pulsar refused the gateway's client certificate in the TLS handshake at {url} "
        "(certificate unknown): check the client certificate in "
        "brokerClientAuthenticationParameters (is it signed by a CA the broker trusts, its "
        "tlsTrustCertsFilePath?)"
    )
    wrong_port = ssl.SSLError(1, "[SSL: WRONG_VERSION_NUMBER] wrong version number")
    wrong_port.reason = "WRONG_VERSION_NUMBER"
    assert _tls_failure(ACCESS, Credentials(), url, wrong_port) == (
        f"the TLS handshake with Pulsar at {url} failed (wrong version number): is that port a "
        "TLS port?"
    )


def admin(handler: httpx.MockTransport) -> PulsarAdmin:
    policy = RetryPolicy(retries=3, timeout=1.0, base_delay=0.1, jitter=0.0)
    return PulsarAdmin(ACCESS.web_url, auth_token="t", policy=policy, transport=handler)


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials(status: int) -> None:
    reply = httpx.MockTransport(lambda request: httpx.Response(status, text="<html>no</html>"))
    async with admin(reply) as client:
        with pytest.raises(BrokerAccessError) as refused:
            await check_admin(client, ACCESS, Credentials(token="t"))
    assert str(refused.value) == (
        f"Pulsar refused the gateway's credentials (HTTP {status}) at {ACCESS.web_url}: "
        "check brokerClientAuthenticationParameters"
    )


async def test_a_certificate_that_fails_verification_is_not_retried(
    autojump_clock: trio.abc.Clock,
) -> None:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        cause = verification_error(20, "unable to get local issuer certificate")
        raise httpx.ConnectError("handshake failed", request=request) from cause

    async with admin(httpx.MockTransport(handler)) as client:
        with pytest.raises(Unavailable) as failed:
            await client.request("GET", "/admin/v2/clusters")
        assert len(asked) == 1
        assert tls_verification_failure(failed.value) is not None
        with pytest.raises(BrokerAccessError, match="unable to get local issuer certificate"):
            await check_admin(client, ACCESS, Credentials(token="t"))


async def test_other_connection_errors_are_retried_and_reported(
    autojump_clock: trio.abc.Clock,
) -> None:
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        raise httpx.ConnectError("connection refused", request=request)

    async with admin(httpx.MockTransport(handler)) as client:
        with pytest.raises(BrokerAccessError) as failed:
            await check_admin(client, ACCESS, Credentials(token="t"))
    assert len(asked) == 4
    assert str(failed.value).startswith(
        f"cannot reach the Pulsar admin API at {ACCESS.web_url}: GET /admin/v2/clusters: "
    )


async def test_a_failed_tls_handshake_with_a_broker_says_what_to_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def handshake_fails(host: str, port: int, **options: object) -> None:
        cause = verification_error(20, "unable to get local issuer certificate")
        raise ProbeFailed(f"TLS handshake with {host}:{port} failed") from cause

    monkeypatch.setattr(access_check, "probe_connect", handshake_fails)
    plain = BrokerAccess("pulsar://broker:6650", "http://broker:8080")
    with pytest.raises(BrokerAccessError) as failed:
        await check_binary(plain, Credentials())
    assert str(failed.value).startswith(
        "the TLS handshake with Pulsar at pulsar://broker:6650 failed (unable to get local "
        "issuer certificate): "
    )
    assert failed.value.__suppress_context__  # raised "from None", as before
