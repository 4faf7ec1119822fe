"""The local stack itself: Pulsar's admin API, its binary protocol, and its ZooKeeper.

These are the services every other integration test (and the gateway) builds on, so they check
the properties the gateway relies on: the default namespace exists, auto-created topics work with
Shared subscriptions and keep message properties, and ZooKeeper accepts reads and writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pulsar
import pytest
from kazoo.client import KazooClient

from tests.conftest import StackEndpoints
from tests.support.stack_script import load_stack_module

pytestmark = pytest.mark.integration

RECEIVE_TIMEOUT_MS = 30_000


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def pulsar_client(pulsar_stack: StackEndpoints) -> Iterator[pulsar.Client]:
    client = pulsar.Client(
        pulsar_stack.broker_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        yield client
    finally:
        client.close()


def test_admin_api_lists_the_default_namespace(pulsar_stack: StackEndpoints) -> None:
    with httpx.Client(base_url=pulsar_stack.web_url, timeout=10) as admin:
        clusters = admin.get("/admin/v2/clusters")
        namespaces = admin.get("/admin/v2/namespaces/public")
    assert clusters.status_code == 200
    assert "standalone" in clusters.json()
    assert namespaces.status_code == 200
    assert "public/default" in namespaces.json()


def test_shared_subscription_receives_message_with_properties(
    pulsar_stack: StackEndpoints, pulsar_client: pulsar.Client
) -> None:
    topic_name = _unique("stack-test")
    topic = f"persistent://public/default/{topic_name}"
    properties = {"content-type": "text/plain", "x-unicode": "héllo wörld", "empty": ""}
    body = b"\x00binary\xffpayload"
    try:
        # Subscribe first: a new subscription starts at the end of the topic.
        consumer = pulsar_client.subscribe(
            topic, "stack-test-sub", consumer_type=pulsar.ConsumerType.Shared
        )
        producer = pulsar_client.create_producer(topic)
        message_id = producer.send(body, properties=properties)

        received = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(received)

        assert received.data() == body
        assert received.properties() == properties
        assert received.message_id() == message_id
        producer.close()
        consumer.close()
    finally:
        with httpx.Client(base_url=pulsar_stack.web_url, timeout=30) as admin:
            admin.delete(
                f"/admin/v2/persistent/public/default/{topic_name}", params={"force": True}
            )


def test_zookeeper_create_read_delete(pulsar_stack: StackEndpoints) -> None:
    path = "/" + _unique("stack-test")
    zk = KazooClient(hosts=pulsar_stack.zookeeper, timeout=10)
    zk.start(timeout=15)
    try:
        zk.create(f"{path}/child", b"payload \x00\xff", makepath=True)
        data, stat = zk.get(f"{path}/child")
        assert data == b"payload \x00\xff"
        assert stat.version == 0
        assert zk.get_children(path) == ["child"]

        zk.delete(path, recursive=True)
        assert zk.exists(path) is None
    finally:
        if zk.exists(path) is not None:
            zk.delete(path, recursive=True)
        zk.stop()
        zk.close()


# --- profiles (no JVM needed: what stack.py computes and generates) ---------------------------


def test_profiles_never_share_a_port() -> None:
    stack = load_stack_module()
    default, secured = set(stack.DEFAULT.ports), set(stack.SECURED.ports)
    assert len(default) == len(secured) == 4
    assert not default & secured
    assert stack.SECURED.broker_url == "pulsar+ssl://127.0.0.1:6661"
    assert stack.SECURED.web_url == "https://127.0.0.1:8453"
    assert stack.DEFAULT.endpoints == stack.ENDPOINTS


def test_the_secured_folder_follows_stack_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    stack = load_stack_module()
    monkeypatch.setenv("STACK_DIR", str(tmp_path))
    monkeypatch.delenv("STACK_SECURED_DIR", raising=False)
    assert stack.SECURED.state_dir() == tmp_path / "secured"
    assert stack.DEFAULT.state_dir() == tmp_path
    monkeypatch.setenv("STACK_SECURED_DIR", str(tmp_path / "elsewhere"))
    assert stack.SECURED.state_dir() == tmp_path / "elsewhere"


def test_minted_tokens_are_standard_hs256_jwts() -> None:
    stack = load_stack_module()
    secret = bytes(range(32))
    token = stack.mint_token("gateway", secret)
    assert jwt.decode(token, secret, algorithms=["HS256"]) == {"sub": "gateway"}
    assert jwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT"}
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(token, bytes(32), algorithms=["HS256"])


def test_secured_keys_do_not_repeat_template_keys(tmp_path: Path) -> None:
    """The bookie reads the same file with commons-configuration, where a repeated key becomes
    a list: the appended secured section must only add keys."""
    stack = load_stack_module()
    files = stack._CredentialFiles(tmp_path)
    section = stack._secured_config(stack.SECURED, files)

    def keys(text: str) -> list[str]:
        lines = [line.strip() for line in text.splitlines()]
        return [line.split("=", 1)[0] for line in lines if line and not line.startswith("#")]

    added = keys(section)
    assert len(added) == len(set(added))
    assert not set(added) & set(keys(stack.CONF_TEMPLATE.read_text()))
    assert "authenticationEnabled" in added and "authorizationEnabled" in added
    assert f"superUserRoles={','.join(stack.SUPERUSER_ROLES)}" in section
