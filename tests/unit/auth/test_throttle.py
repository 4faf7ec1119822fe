"""The failure throttle, the certificate CN, and the cipher name translation."""

from __future__ import annotations

import pytest

from gateway.auth.cipher_names import is_tls13_suite, openssl_name, plan_ciphers
from gateway.auth.throttle import FailureThrottle
from gateway.auth.tls_identity import common_name

# --------------------------------------------------------------------------- throttle


def test_first_failures_are_free_then_the_delay_doubles_up_to_the_cap() -> None:
    throttle = FailureThrottle(free_failures=2, first_delay=0.25, max_delay=2.0)
    delays = [throttle.failed("10.0.0.1", float(t)) for t in range(8)]
    assert delays == [0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 2.0, 2.0]


def test_other_addresses_are_not_slowed() -> None:
    throttle = FailureThrottle()
    for t in range(10):
        throttle.failed("10.0.0.1", float(t))
    assert throttle.failed("10.0.0.2", 10.0) == 0.0


def test_failures_are_forgotten_after_the_window() -> None:
    throttle = FailureThrottle(window=60.0)
    for t in range(5):
        throttle.failed("10.0.0.1", float(t))
    assert throttle.failures("10.0.0.1", 30.0) == 5
    assert throttle.failed("10.0.0.1", 100.0) == 0.0
    assert throttle.failures("10.0.0.1", 100.0) == 1


def test_memory_is_bounded() -> None:
    throttle = FailureThrottle(max_addresses=100)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}", 0.0)
    assert throttle.failures("10.0.0.0", 0.0) == 0  # evicted, least recently seen
    assert throttle.failures("10.0.3.231", 0.0) == 1


def test_zero_max_delay_disables_waiting() -> None:
    throttle = FailureThrottle(max_delay=0.0)
    assert {throttle.failed("a", float(t)) for t in range(10)} == {0.0}


# --------------------------------------------------------------------------- identity


def test_common_name_of_a_verified_certificate() -> None:
    cert = {"subject": ((("organizationName", "Org"),), (("commonName", "alice"),))}
    assert common_name(cert) == "alice"


@pytest.mark.parametrize(
    "cert",
    [
        None,
        {},  # what getpeercert() returns for an unverified certificate
        {"subject": ((("organizationName", "Org"),),)},
        {"subject": ((("commonName", "a"),), (("commonName", "b"),))},
        {"subject": ((("commonName", ""),),)},
    ],
)
def test_no_or_ambiguous_common_name(cert: dict[str, object] | None) -> None:
    assert common_name(cert) is None


# --------------------------------------------------------------------------- cipher names


@pytest.mark.parametrize(
    ("java", "openssl"),
    [
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
        ("TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "DHE-RSA-AES128-GCM-SHA256"),
        ("TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"),
        ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
        ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
        ("TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"),
        ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
        ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ],
)
def test_openssl_names(java: str, openssl: str) -> None:
    assert openssl_name(java) == openssl


def test_tls13_suites_are_told_apart() -> None:
    assert is_tls13_suite("TLS_AES_128_GCM_SHA256")
    assert is_tls13_suite("TLS_CHACHA20_POLY1305_SHA256")
    assert not is_tls13_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    plan = plan_ciphers(("TLS_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_CBC_SHA"))
    assert plan.tls13 == ("TLS_AES_128_GCM_SHA256",)
    assert plan.tls12 == ("AES128-SHA",)
