"""RabbitMQ's own ``rabbitmqadmin`` (Debian's rabbitmq-server package ships it as
/usr/bin/rabbitmqadmin; scripts/debian_packages.sh installs it) against the gateway: declare,
list, publish, get, purge and delete queues, exchanges and bindings; vhosts and permissions;
export and import definitions; close a connection."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support.managed_fleet import Managed, closed_by_broker, connect_named, find_connection

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        shutil.which("rabbitmqadmin") is None,
        reason="rabbitmqadmin is not installed (scripts/debian_packages.sh rabbitmq-server)",
    ),
]


def admin(gateway: Managed, *args: str, vhost: str = "/") -> subprocess.CompletedProcess[str]:
    port = gateway.url.rsplit(":", 1)[1]
    return subprocess.run(
        [
            "rabbitmqadmin",
            "-H",
            "127.0.0.1",
            "-P",
            port,
            "-u",
            "guest",
            "-p",
            "guest",
            "-V",
            vhost,
            "-f",
            "raw_json",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr + result.stdout
    return result.stdout


def listed(gateway: Managed, kind: str, vhost: str = "/") -> list[dict[str, object]]:
    return list(json.loads(ok(admin(gateway, "list", kind, vhost=vhost))))


def test_declare_list_publish_get_and_delete(gateway: Managed) -> None:
    queue, exchange = f"ra-q-{uuid.uuid4().hex[:6]}", f"ra-x-{uuid.uuid4().hex[:6]}"
    ok(
        admin(
            gateway,
            "declare",
            "queue",
            f"name={queue}",
            "durable=true",
            'arguments={"x-max-length": 100}',
        )
    )
    ok(admin(gateway, "declare", "exchange", f"name={exchange}", "type=direct"))
    ok(
        admin(
            gateway,
            "declare",
            "binding",
            f"source={exchange}",
            f"destination={queue}",
            "routing_key=rk",
        )
    )
    queues = {q["name"]: q for q in listed(gateway, "queues")}
    assert queues[queue]["durable"] is True
    assert queues[queue]["arguments"] == {"x-max-length": 100}
    assert exchange in {e["name"] for e in listed(gateway, "exchanges")}
    assert {"source": exchange, "destination": queue, "routing_key": "rk"}.items() <= next(
        b for b in listed(gateway, "bindings") if b["source"] == exchange
    ).items()
    assert "Message published" in ok(
        admin(gateway, "publish", f"exchange={exchange}", "routing_key=rk", "payload=hello")
    )
    got = json.loads(ok(admin(gateway, "get", f"queue={queue}", "ackmode=ack_requeue_true")))
    assert [(m["payload"], m["routing_key"]) for m in got] == [("hello", "rk")]
    assert {q["name"]: q for q in listed(gateway, "queues")}[queue]["messages"] == 1
    ok(admin(gateway, "purge", "queue", f"name={queue}"))
    assert {q["name"]: q for q in listed(gateway, "queues")}[queue]["messages"] == 0
    ok(
        admin(
            gateway,
            "delete",
            "binding",
            f"source={exchange}",
            "destination_type=queue",
            f"destination={queue}",
            "properties_key=rk",
        )
    )
    assert not [b for b in listed(gateway, "bindings") if b["source"] == exchange]
    ok(admin(gateway, "delete", "queue", f"name={queue}"))
    ok(admin(gateway, "delete", "exchange", f"name={exchange}"))
    assert queue not in {q["name"] for q in listed(gateway, "queues")}
    missing = admin(gateway, "delete", "queue", f"name={queue}")
    assert missing.returncode != 0
    assert f"Not found: /api/queues/%2F/{queue}" in missing.stderr


def test_refusals_come_back_as_rabbitmqadmin_shows_them(gateway: Managed) -> None:
    queue = f"ra-q-{uuid.uuid4().hex[:6]}"
    ok(admin(gateway, "declare", "queue", f"name={queue}", "durable=true"))
    refused = admin(gateway, "declare", "queue", f"name={queue}", "durable=false")
    assert refused.returncode != 0
    assert f"inequivalent arg 'durable' for queue '{queue}' in vhost '/'" in refused.stderr
    ok(admin(gateway, "delete", "queue", f"name={queue}"))
    reserved = admin(gateway, "declare", "queue", "name=amq.mine")
    assert reserved.returncode != 0 and "Access refused" in reserved.stderr


def test_vhosts_permissions_and_definitions(gateway: Managed, tmp_path: Path) -> None:
    vhost = f"ra-{uuid.uuid4().hex[:8]}"
    ok(admin(gateway, "declare", "vhost", f"name={vhost}"))
    assert vhost in {v["name"] for v in listed(gateway, "vhosts")}
    ok(
        admin(
            gateway,
            "declare",
            "permission",
            f"vhost={vhost}",
            "user=app",
            "configure=^app-",
            "write=.*",
            "read=.*",
        )
    )
    assert {
        "user": "app",
        "vhost": vhost,
        "configure": "^app-",
        "write": ".*",
        "read": ".*",
    } in listed(gateway, "permissions")
    ok(admin(gateway, "declare", "exchange", "name=app-x", "type=topic", vhost=vhost))
    ok(admin(gateway, "declare", "queue", "name=app-q", vhost=vhost))
    ok(
        admin(
            gateway,
            "declare",
            "binding",
            "source=app-x",
            "destination=app-q",
            "routing_key=#",
            vhost=vhost,
        )
    )
    exported = tmp_path / "definitions.json"
    ok(admin(gateway, "export", str(exported), vhost=vhost))
    document = json.loads(exported.read_text())
    assert [q["name"] for q in document["queues"]] == ["app-q"]
    assert [(e["name"], e["type"]) for e in document["exchanges"]] == [("app-x", "topic")]
    assert [(b["source"], b["destination"], b["routing_key"]) for b in document["bindings"]] == [
        ("app-x", "app-q", "#")
    ]
    ok(admin(gateway, "delete", "queue", "name=app-q", vhost=vhost))
    ok(admin(gateway, "delete", "exchange", "name=app-x", vhost=vhost))
    for _ in range(2):  # importing is idempotent
        ok(admin(gateway, "import", str(exported), vhost=vhost))
    assert [q["name"] for q in listed(gateway, "queues", vhost)] == ["app-q"]
    bindings = [b for b in listed(gateway, "bindings", vhost) if b["source"] == "app-x"]
    assert [(b["destination"], b["routing_key"]) for b in bindings] == [("app-q", "#")]
    ok(admin(gateway, "delete", "permission", f"vhost={vhost}", "user=app"))
    assert not [p for p in listed(gateway, "permissions") if p["vhost"] == vhost]
    ok(admin(gateway, "delete", "vhost", f"name={vhost}"))
    assert vhost not in {v["name"] for v in listed(gateway, "vhosts")}


def test_close_a_connection(gateway: Managed) -> None:
    name = f"ra-conn-{uuid.uuid4().hex[:6]}"
    connection = connect_named(gateway, name)
    try:
        found = find_connection(gateway, name)
        ok(admin(gateway, "close", "connection", f"name={found['name']}"))
        assert closed_by_broker(connection) == (
            320,
            "CONNECTION_FORCED - Closed via management plugin",
        )
    finally:
        if connection.is_open:
            connection.close()


def test_overview_and_nodes(gateway: Managed) -> None:
    overview = json.loads(ok(admin(gateway, "show", "overview")))
    assert overview[0]["rabbitmq_version"] == "3.13.7"
    assert [node["running"] for node in listed(gateway, "nodes")] == [True]
