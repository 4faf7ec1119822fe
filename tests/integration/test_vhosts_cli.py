"""``starlight-rabbitmq vhosts add|delete|list`` on the real stack, as a user runs it (issue 32
item 3): a vhost a client cannot open until it is added, a delete refused while it has queues,
and Pulsar's tenant and namespace following the command."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pika
import pika.exceptions
import pytest

from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, stack_config

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "gateway.cli", "vhosts"]

pytestmark = pytest.mark.timeout(180)


def vhosts(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args[:1], "-c", str(config), *args[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.fixture
def config_file(tmp_path: Path, pulsar_stack: object) -> Path:
    path = tmp_path / "gateway.conf"
    path.write_text(
        "brokerServiceURL=pulsar://127.0.0.1:6650\n"
        "brokerWebServiceURL=http://127.0.0.1:8080\n"
        "configurationStoreServers=127.0.0.1:2181\n"
    )
    return path


@pytest.fixture
def pulsar(pulsar_stack: object) -> Iterator[httpx.Client]:
    with httpx.Client(base_url="http://127.0.0.1:8080", timeout=30) as client:
        yield client


@pytest.fixture
def gateway(pulsar_stack: object) -> Iterator[GatewayInThread]:
    config = stack_config(
        "http://127.0.0.1:8080", "pulsar://127.0.0.1:6650", "127.0.0.1:2181", "default"
    )
    with GatewayInThread(backend_factory=backend_factory(config)) as running:
        yield running


def connect(gateway: GatewayInThread, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", gateway.port, vhost, heartbeat=0)
    )


def test_add_makes_a_vhost_clients_can_open_and_delete_refuses_it_while_it_has_queues(
    config_file: Path, pulsar: httpx.Client, gateway: GatewayInThread
) -> None:
    tenant = f"vt-{uuid.uuid4().hex[:10]}"
    vhost = f"{tenant}/orders"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(gateway, vhost)  # 530: its namespace does not exist yet

    added = vhosts(config_file, "add", vhost)
    assert added.returncode == 0, added.stderr
    assert f'Adding vhost "{vhost}" ({vhost}) ...' in added.stdout
    assert pulsar.get(f"/admin/v2/tenants/{tenant}").status_code == 200
    assert f"{tenant}/orders" in pulsar.get(f"/admin/v2/namespaces/{tenant}").json()
    listed = vhosts(config_file, "list")
    assert listed.returncode == 0, listed.stderr
    assert f"{vhost}\t{vhost}" in listed.stdout.splitlines()
    assert listed.stdout.splitlines()[0] == "name\tnamespace"

    again = vhosts(config_file, "add", vhost)
    assert again.returncode == 0
    assert "exists already" in again.stderr

    connection = connect(gateway, vhost)
    try:
        channel = connection.channel()
        channel.queue_declare("kept", durable=True)
        channel.basic_publish("", "kept", b"m")
    finally:
        connection.close()

    refused = vhosts(config_file, "delete", vhost)
    assert refused.returncode == 3
    assert "has 1 queue(s)" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert pulsar.get(f"/admin/v2/namespaces/{tenant}").json() == [f"{tenant}/orders"]

    deleted = vhosts(config_file, "delete", vhost, "--force")
    assert deleted.returncode == 0, deleted.stderr
    # The tenant came with the vhost and goes with its last namespace.
    assert pulsar.get(f"/admin/v2/tenants/{tenant}").status_code == 404
    assert vhost not in vhosts(config_file, "list").stdout
    missing = vhosts(config_file, "delete", vhost)
    assert missing.returncode == 3
    assert f"vhost {vhost!r} does not exist" in missing.stderr


def test_a_short_vhost_is_a_namespace_of_the_default_tenant_which_stays(
    config_file: Path, pulsar: httpx.Client
) -> None:
    name = f"v-{uuid.uuid4().hex[:10]}"
    assert vhosts(config_file, "add", "-q", f"/{name}").returncode == 0
    try:
        assert f"public/{name}" in pulsar.get("/admin/v2/namespaces/public").json()
        # Listed under its shortest name, which maps back to the same namespace.
        assert f"{name}\tpublic/{name}" in vhosts(config_file, "list").stdout.splitlines()
    finally:
        deleted = vhosts(config_file, "delete", name)
    assert deleted.returncode == 0, deleted.stderr  # no queues: no --force needed
    assert f"public/{name}" not in pulsar.get("/admin/v2/namespaces/public").json()
    assert pulsar.get("/admin/v2/tenants/public").status_code == 200


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("add", "a b"), 2, "invalid vhost name 'a b': character(s) ' ' not allowed"),
        (("add", "/a/b/c"), 2, "3 segments"),
        (("delete",), 2, "the following arguments are required: vhost"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    config_file: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    result = vhosts(config_file, *args)
    assert result.returncode == code
    assert says in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_pulsar_is_one_line_and_exit_code_1(tmp_path: Path) -> None:
    config = tmp_path / "gateway.conf"
    config.write_text(
        "brokerServiceURL=pulsar://127.0.0.1:1\n"
        "brokerWebServiceURL=http://127.0.0.1:1\n"
        "configurationStoreServers=127.0.0.1:2181\n"
    )
    result = vhosts(config, "add", "somewhere")
    assert result.returncode == 1
    assert "cannot create vhost 'somewhere' (public/somewhere)" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- amqpAutoCreateVhosts


@pytest.fixture
def auto_creating(pulsar_stack: object) -> Iterator[GatewayInThread]:
    config = replace(
        stack_config(
            "http://127.0.0.1:8080", "pulsar://127.0.0.1:6650", "127.0.0.1:2181", "default"
        ),
        amqpAutoCreateVhosts=True,
    )
    with GatewayInThread(backend_factory=backend_factory(config)) as running:
        yield running


def test_an_unknown_vhost_is_refused_by_default_as_on_rabbitmq(
    pulsar: httpx.Client, gateway: GatewayInThread
) -> None:
    tenant = f"vt-{uuid.uuid4().hex[:10]}"
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        connect(gateway, f"{tenant}/orders")  # 530 NOT_ALLOWED: amqpAutoCreateVhosts=false
    assert pulsar.get(f"/admin/v2/tenants/{tenant}").status_code == 404  # nothing created


def test_with_auto_create_the_first_connection_creates_the_namespace(
    config_file: Path, pulsar: httpx.Client, auto_creating: GatewayInThread
) -> None:
    tenant = f"vt-{uuid.uuid4().hex[:10]}"
    short = f"v-{uuid.uuid4().hex[:10]}"
    try:
        for vhost in (f"{tenant}/orders", f"/{short}"):
            connection = connect(auto_creating, vhost)
            try:
                channel = connection.channel()
                channel.confirm_delivery()
                channel.queue_declare("first", durable=True)
                channel.basic_publish("", "first", b"hello")
                method, _, body = channel.basic_get("first", auto_ack=True)
                assert method is not None and body == b"hello"
            finally:
                connection.close()
        # The tenant the vhost named, as `vhosts add` creates it, and both namespaces.
        assert pulsar.get(f"/admin/v2/tenants/{tenant}").status_code == 200
        assert pulsar.get(f"/admin/v2/namespaces/{tenant}").json() == [f"{tenant}/orders"]
        assert f"public/{short}" in pulsar.get("/admin/v2/namespaces/public").json()
        # The same vhosts the command lists.
        listed = vhosts(config_file, "list").stdout.splitlines()
        assert f"{tenant}/orders\t{tenant}/orders" in listed
        assert f"{short}\tpublic/{short}" in listed
        # A second connection opens what is there.
        connect(auto_creating, f"/{tenant}/orders").close()
    finally:
        for vhost in (f"{tenant}/orders", short):
            vhosts(config_file, "delete", "-q", vhost, "--force")
    assert pulsar.get(f"/admin/v2/tenants/{tenant}").status_code == 404
