"""Cipher names: Java/IANA suite names translated to OpenSSL's, TLS 1.3 suites told apart."""

from __future__ import annotations

import pytest

from gateway.auth.cipher_names import is_tls13_suite, openssl_name, plan_ciphers


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
