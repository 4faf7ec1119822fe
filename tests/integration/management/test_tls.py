"""``managementListener=https://...``: the management API over TLS with the AMQP listeners'
certificate (tlsCertificateFilePath/tlsKeyFilePath), as RabbitMQ's ``management.ssl``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.managed_fleet import managed_fleet
from tests.support.pki import make_pki

pytestmark = pytest.mark.timeout(180)


def test_https_with_the_gateways_certificate(tmp_path: Path, pulsar_stack: Any) -> None:
    pki = make_pki(tmp_path / "pki")
    certificate = (
        f"tlsCertificateFilePath={pki.server.cert_path}\ntlsKeyFilePath={pki.server.key_path}\n"
    )
    with managed_fleet(tmp_path, pulsar_stack, certificate) as fleet:
        gateway = fleet.start("tls-1", scheme="https")
        assert gateway.url.startswith("https://localhost:")
        with httpx.Client(
            base_url=gateway.url, auth=("guest", "guest"), verify=pki.client_context(), timeout=30
        ) as api:
            assert api.get("/api/whoami").json() == {"name": "guest", "tags": ["administrator"]}
            listeners = api.get("/api/overview").json()["listeners"]
            assert "https" in [listener["protocol"] for listener in listeners]
        plain_url = gateway.url.replace("https:", "http:")
        with httpx.Client(base_url=plain_url, timeout=30) as plain, pytest.raises(httpx.HTTPError):
            plain.get("/api/whoami")  # plain HTTP on the TLS port gets no answer
