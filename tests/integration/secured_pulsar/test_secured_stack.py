"""The secured profile itself (scripts/stack.py up --profile secured): TLS-only ports, who may
connect (a token signed with its key, or a client certificate of its CA) and what they may do."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pulsar
import pytest
from cryptography import x509

from tests.conftest import REPO_DIR
from tests.integration.secured_pulsar.support import SecuredStack

pytestmark = pytest.mark.integration


def test_only_tls_is_served(secured_pulsar: SecuredStack) -> None:
    with secured_pulsar.admin_http() as admin:
        cluster = admin.get("/admin/v2/clusters/standalone").json()
    assert cluster.get("serviceUrl") is None
    assert cluster.get("brokerServiceUrl") is None
    assert cluster["serviceUrlTls"] == secured_pulsar.web_url
    assert cluster["brokerServiceUrlTls"] == secured_pulsar.broker_url
    # Plain HTTP to the TLS web port gets no HTTP answer.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{secured_pulsar.web_port}/admin/v2/clusters", timeout=5)


def test_broker_certificate_names_and_client_certificate_role(
    secured_pulsar: SecuredStack,
) -> None:
    context = ssl.create_default_context(cafile=secured_pulsar.ca_cert)
    with (
        socket.create_connection(("127.0.0.1", secured_pulsar.broker_port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        names = tls.getpeercert()["subjectAltName"]
    assert set(names) == {("IP Address", "127.0.0.1"), ("DNS", "localhost")}
    client = x509.load_pem_x509_certificate(Path(secured_pulsar.client_cert).read_bytes())
    assert client.subject.rfc4514_string() == "CN=gateway-client"


def test_who_may_use_the_admin_api(secured_pulsar: SecuredStack) -> None:
    verify = ssl.create_default_context(cafile=secured_pulsar.ca_cert)
    tenants = f"{secured_pulsar.web_url}/admin/v2/tenants"
    assert httpx.get(tenants, verify=verify).status_code == 401  # nobody
    with secured_pulsar.admin_http(token="eyJhbGciOiJIUzI1NiJ9.e30.c2ln") as forged:
        assert forged.get("/admin/v2/tenants").status_code == 401
    with secured_pulsar.admin_http(token=secured_pulsar.user_token) as user:
        assert user.get("/admin/v2/clusters").status_code == 200  # authenticated...
        assert user.get("/admin/v2/tenants").status_code in (401, 403)  # ...not authorized
    with secured_pulsar.admin_http() as superuser:
        assert "public" in superuser.get("/admin/v2/tenants").json()
    verify.load_cert_chain(secured_pulsar.client_cert, secured_pulsar.client_key)
    assert "public" in httpx.get(tenants, verify=verify).json()  # the client certificate


def test_who_may_publish(secured_pulsar: SecuredStack) -> None:
    topic = f"persistent://public/default/secured-{uuid.uuid4().hex[:10]}"

    def client(authentication: pulsar.Authentication) -> pulsar.Client:
        return pulsar.Client(
            secured_pulsar.broker_url,
            authentication=authentication,
            tls_trust_certs_file_path=secured_pulsar.ca_cert,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )

    user = client(pulsar.AuthenticationToken(secured_pulsar.user_token))
    try:
        with pytest.raises(pulsar.exceptions.AuthorizationError):
            user.create_producer(topic)
    finally:
        user.close()
    certificate = client(
        pulsar.AuthenticationTLS(secured_pulsar.client_cert, secured_pulsar.client_key)
    )
    try:
        producer = certificate.create_producer(topic)
        assert producer.send(b"hello") is not None
        producer.close()
    finally:
        certificate.close()
        with secured_pulsar.admin_http() as admin:
            admin.delete(f"/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}")


def test_status_prints_what_clients_need(secured_pulsar: SecuredStack) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_DIR / "scripts" / "stack.py"),
            "status",
            "--profile",
            "secured",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["broker_url"] == secured_pulsar.broker_url
    assert info["web_url"] == secured_pulsar.web_url
    assert info["superuser_token"] == secured_pulsar.superuser_token
    assert info["client_role"] == "gateway-client"
