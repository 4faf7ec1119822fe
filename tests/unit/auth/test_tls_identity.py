"""The certificate's CN as the user name of EXTERNAL, and when there is none."""

from __future__ import annotations

import pytest

from gateway.auth.tls_identity import common_name


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
