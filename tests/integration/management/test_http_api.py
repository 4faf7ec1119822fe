"""The management API's paths, JSON shapes, status codes and error bodies, checked with plain
HTTP requests against a real gateway (the shapes are RabbitMQ 3.13's, read from a live
RabbitMQ node and rabbitmq_management's sources: docs/management.md)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pika
import pytest

from tests.support.managed_fleet import Managed, ManagedFleet

pytestmark = pytest.mark.timeout(180)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_whoami_overview_cluster_name_nodes_and_health(gateway: Managed) -> None:
    with gateway.client() as api:
        assert api.get("/api/whoami").json() == {"name": "guest", "tags": ["administrator"]}
        overview = api.get("/api/overview").json()
        assert overview["product_name"] == "RabbitMQ"
        assert overview["rabbitmq_version"] == "3.13.7"
        assert overview["cluster_name"] == "starlight-rabbitmq"
        assert set(overview["object_totals"]) == {
            "connections",
            "channels",
            "consumers",
            "exchanges",
            "queues",
        }
        assert {t["name"] for t in overview["exchange_types"]} == {
            "direct",
            "fanout",
            "headers",
            "topic",
        }
        assert api.get("/api/cluster-name").json() == {"name": "starlight-rabbitmq"}
        nodes = api.get("/api/nodes").json()
        assert [node["running"] for node in nodes] == [True]
        assert api.get(f"/api/nodes/{nodes[0]['name']}").json()["name"] == nodes[0]["name"]
        assert api.get("/api/health/checks/alarms").json() == {"status": "ok"}
        assert api.get("/api/health/checks/virtual-hosts").json() == {"status": "ok"}
        assert api.get("/api/aliveness-test/%2F").json() == {"status": "ok"}
        vhosts = api.get("/api/vhosts").json()
        assert [v["name"] for v in vhosts] == ["/"]  # the fleet's own chroot has only it
        assert api.get("/api/vhosts/%2F").json()["name"] == "/"


def test_a_queue_through_its_life_with_rabbitmqs_shapes(gateway: Managed) -> None:
    queue, exchange = unique("q"), unique("x")
    with gateway.client() as api:
        body = {"durable": True, "arguments": {"x-max-length": 10}}
        assert api.put(f"/api/queues/%2F/{queue}", json=body).status_code == 201
        assert api.put(f"/api/queues/%2F/{queue}", json=body).status_code == 204
        refused = api.put(f"/api/queues/%2F/{queue}", json={"durable": False})
        assert refused.status_code == 400
        assert refused.json() == {
            "error": "bad_request",
            "reason": f"inequivalent arg 'durable' for queue '{queue}' in vhost '/': "
            "received 'false' but current is 'true'",
        }
        assert api.put(f"/api/exchanges/%2F/{exchange}", json={"type": "topic"}).status_code == 201
        bound = api.post(f"/api/bindings/%2F/e/{exchange}/q/{queue}", json={"routing_key": "a.b"})
        assert bound.status_code == 201
        assert bound.headers["location"] == f"{queue}/a.b"
        published = api.post(
            f"/api/exchanges/%2F/{exchange}/publish",
            json={
                "properties": {"delivery_mode": 2, "headers": {"h": 1}},
                "routing_key": "a.b",
                "payload": "hello",
                "payload_encoding": "string",
            },
        )
        assert published.json() == {"routed": True}
        shown = api.get(f"/api/queues/%2F/{queue}").json()
        for key, value in {
            "name": queue,
            "vhost": "/",
            "durable": True,
            "auto_delete": False,
            "exclusive": False,
            "arguments": {"x-max-length": 10},
            "type": "classic",
            "consumers": 0,
            "messages": 1,
            "messages_ready": 1,
            "messages_unacknowledged": 0,
        }.items():
            assert shown[key] == value, key
        assert shown["message_stats"]["publish_details"]["rate"] >= 0.0
        listed = api.get("/api/queues/%2F", params={"columns": "name,messages"}).json()
        assert {"name": queue, "messages": 1} in listed
        bindings = api.get(f"/api/bindings/%2F/e/{exchange}/q/{queue}").json()
        assert bindings == [
            {
                "source": exchange,
                "vhost": "/",
                "destination": queue,
                "destination_type": "queue",
                "routing_key": "a.b",
                "arguments": {},
                "properties_key": "a.b",
            }
        ]
        got = api.post(
            f"/api/queues/%2F/{queue}/get",
            json={"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"},
        ).json()
        assert got[0]["payload"] == "hello" and got[0]["payload_encoding"] == "string"
        assert got[0]["properties"] == {"delivery_mode": 2, "headers": {"h": 1}}
        assert got[0]["routing_key"] == "a.b" and got[0]["exchange"] == exchange
        not_empty = api.delete(f"/api/queues/%2F/{queue}", params={"if-empty": "true"})
        assert not_empty.status_code == 400
        assert not_empty.json()["reason"] == f"queue '{queue}' in vhost '/' not empty"
        assert api.delete(f"/api/queues/%2F/{queue}/contents").status_code == 204
        unbound = api.delete(f"/api/bindings/%2F/e/{exchange}/q/{queue}/a.b")
        assert unbound.status_code == 204
        assert api.delete(f"/api/bindings/%2F/e/{exchange}/q/{queue}/a.b").status_code == 404
        assert api.delete(f"/api/queues/%2F/{queue}").status_code == 204
        assert api.delete(f"/api/queues/%2F/{queue}").status_code == 404
        assert api.delete(f"/api/exchanges/%2F/{exchange}").status_code == 204


def test_a_queue_declared_over_amqp_is_counted_for_keda(gateway: Managed) -> None:
    """KEDA's scaler (HTTP protocol): GET /api/queues/<vhost>/<queue>, and its regex form
    ``?page=1&use_regex=true&pagination=false&name=...&page_size=...``."""
    queue = unique("work")
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gateway.port))
    try:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for index in range(7):
            channel.basic_publish("", queue, f"m{index}".encode())
    finally:
        connection.close()
    with gateway.client() as api:
        info = api.get(f"/api/queues/%2F/{queue}").json()
        assert (info["messages"], info["messages_ready"], info["messages_unacknowledged"]) == (
            7,
            7,
            0,
        )
        assert info["message_stats"]["publish"] == 7
        page = api.get(
            "/api/queues/%2F",
            params={
                "page": 1,
                "use_regex": "true",
                "pagination": "false",
                "name": f"^{queue}$",
                "page_size": 100,
            },
        ).json()
        assert page["page_count"] == 1 and page["filtered_count"] == 1
        assert page["items"][0]["messages"] == 7
        # Flower's broker tab asks for queues/<vhost>, or queues/ for the default vhost
        # (urljoin makes its queues// that: test_flower.py). An empty vhost segment is none
        # on RabbitMQ: /api/queues// is 404 there (a live 3.10.8 node), and here.
        for path in ("/api/queues/%2F", "/api/queues/"):
            flower = {q["name"]: q["messages"] for q in api.get(path).json()}
            assert flower[queue] == 7
        assert api.get("/api/queues//").status_code == 404
        # KEDA's QueueLength mode with value 5: ceil(7 / 5) replicas.
        assert -(-page["items"][0]["messages"] // 5) == 2
        api.delete(f"/api/queues/%2F/{queue}")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "answer"),
    [
        (
            "GET",
            "/api/queues/nope",
            None,
            404,
            {"error": "Object Not Found", "reason": "Not Found"},
        ),
        (
            "GET",
            "/api/queues/%2F/nope",
            None,
            404,
            {"error": "Object Not Found", "reason": "Not Found"},
        ),
        (
            "PUT",
            "/api/queues/nope/q",
            b"{}",
            404,
            {"error": "not_found", "reason": "vhost_not_found"},
        ),
        (
            "PUT",
            "/api/queues/%2F/q",
            b'{"durable":',
            400,
            {"error": "bad_request", "reason": "not_json"},
        ),
        (
            "PUT",
            "/api/queues/%2F/q",
            b'{"durable":"yes"}',
            400,
            {"error": "bad_request", "reason": ["not_boolean", "yes"]},
        ),
        (
            "PUT",
            "/api/queues/%2F/amq.q",
            b"{}",
            401,
            {"error": "not_authorised", "reason": "Access refused."},
        ),
        (
            "PUT",
            "/api/exchanges/%2F/x",
            b'{"type":"nope"}',
            400,
            {"error": "bad_request", "reason": "unknown exchange type 'nope'"},
        ),
        (
            "DELETE",
            "/api/exchanges/%2F/amq.direct",
            None,
            401,
            {"error": "not_authorised", "reason": "Access refused."},
        ),
        ("GET", "/api/nothing", None, 404, {"error": "Object Not Found", "reason": "Not Found"}),
        (
            "DELETE",
            "/api/connections/nope",
            None,
            404,
            {"error": "Object Not Found", "reason": "Not Found"},
        ),
        ("PUT", "/api/vhosts/a%20b", None, 400, None),
        ("PUT", "/api/users/bob", b'{"password":"p","tags":""}', 400, None),
        ("GET", "/api/queues/%C3%28", None, 400, None),
    ],
)
def test_bad_input_gets_rabbitmqs_status_and_body(
    gateway: Managed,
    method: str,
    path: str,
    body: bytes | None,
    status: int,
    answer: dict[str, Any] | None,
) -> None:
    with gateway.client() as api:
        response = api.request(
            method, path, content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == status, response.text
    data = response.json()
    assert set(data) == {"error", "reason"}
    if answer is not None:
        assert data == answer
    assert "Traceback" not in response.text


def test_credentials_and_methods_are_judged_as_by_cowboy(gateway: Managed) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as anonymous:
        missing = anonymous.get("/api/overview")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
        assert missing.content == b""
        garbled = anonymous.get("/api/overview", headers={"authorization": "Basic !!!"})
        assert garbled.status_code == 401
        assert garbled.json() == {"error": "not_authorized", "reason": "Not_Authorized"}
        # 404 and 405 come before the credentials.
        assert anonymous.get("/api/nothing").status_code == 404
    with gateway.client() as api:
        wrong = api.post("/api/overview")
        assert wrong.status_code == 405
        assert wrong.headers["allow"] == "GET, HEAD, OPTIONS"
        assert api.get("/api/connections/").status_code == 200  # amqp091-go's trailing slash


def test_vhosts_and_permissions_over_http(management: ManagedFleet, gateway: Managed) -> None:
    vhost = unique("vh")
    with gateway.client() as api:
        assert api.put(f"/api/vhosts/{vhost}").status_code == 201
        assert api.put(f"/api/vhosts/{vhost}").status_code == 204
        assert vhost in [v["name"] for v in api.get("/api/vhosts").json()]
        path = f"/api/permissions/{vhost}/app"
        patterns = {"configure": "^app-", "write": ".*", "read": ".*"}
        assert api.put(path, json=patterns).status_code == 201
        assert api.put(path, json=patterns).status_code == 204
        assert api.get(path).json() == {"user": "app", "vhost": vhost, **patterns}
        assert api.get(f"/api/vhosts/{vhost}/permissions").json() == [
            {"user": "app", "vhost": vhost, **patterns}
        ]
        missing = api.put(path, json={"configure": ".*"})
        assert missing.json() == {
            "error": "bad_request",
            "reason": "[{key_missing,write},{key_missing,read}]",
        }
        bad = api.put(path, json={**patterns, "read": "("})
        assert bad.status_code == 400 and "invalid read pattern '('" in bad.json()["reason"]
        assert api.put(f"/api/queues/{vhost}/kept", json={}).status_code == 201
        assert api.delete(path).status_code == 204
        assert api.delete(path).status_code == 404
        # Over HTTP, as RabbitMQ: the vhost goes with its queues.
        assert api.delete(f"/api/vhosts/{vhost}").status_code == 204
        assert api.get(f"/api/vhosts/{vhost}").status_code == 404
        assert api.delete(f"/api/vhosts/{vhost}").status_code == 404
