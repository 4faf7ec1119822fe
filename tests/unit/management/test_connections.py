"""gateway/management/connections.py: ``/api/consumers`` made of this replica's consumers (from
memory) and the other replicas' records, in RabbitMQ's shape, filtered by user and vhost."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pytest

from gateway.auth.authenticator import AcceptAnyone
from gateway.management.connections import consumer_json, held_at_most, list_consumers
from gateway.management.context import Call, Context
from gateway.management.errors import ApiError
from gateway.management.http import Request
from gateway.management.users import User, Users
from gateway.metadata.connections import ConsumerGroup, RemoteConsumers
from gateway.metadata.permissions import MemoryPermissionStore
from gateway.model.vhost import Namespace, VhostMapper

HERE = {
    "name": "10.0.0.1:4000 -> 10.0.0.9:5672",
    "node": "rabbit@here",
    "peer_host": "10.0.0.1",
    "peer_port": 4000,
    "user": "alice",
    "vhost": "/",
}
THERE = {**HERE, "name": "10.0.0.2:5000 -> 10.0.0.8:5672", "node": "rabbit@there"}
THERE.update(peer_host="10.0.0.2", peer_port=5000, user="bob", vhost="orders")


def consumer(tag: str, queue: str, channel: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "consumer_tag": tag,
        "queue": queue,
        "channel": channel,
        "ack_required": True,
        "prefetch_count": 10,
        "exclusive": False,
        "active": True,
        "activity_status": "up",
        "arguments": {},
        **more,
    }


def test_a_consumer_gets_rabbitmqs_shape() -> None:
    shown = consumer_json(HERE, consumer("t", "q", 3, arguments={"x-priority": 2}))
    assert shown == {
        "arguments": {"x-priority": 2},
        "ack_required": True,
        "active": True,
        "activity_status": "up",
        "channel_details": {
            "connection_name": HERE["name"],
            "name": f"{HERE['name']} (3)",
            "node": "rabbit@here",
            "number": 3,
            "peer_host": "10.0.0.1",
            "peer_port": 4000,
            "user": "alice",
        },
        "consumer_tag": "t",
        "exclusive": False,
        "prefetch_count": 10,
        "queue": {"name": "q", "vhost": "/"},
    }


class Local:
    def consumers(self) -> dict[str, ConsumerGroup]:
        return {"c1": ConsumerGroup(HERE, [consumer("b", "q2"), consumer("a", "q1", 2)])}


class Directory:
    async def consumers(self) -> list[RemoteConsumers]:
        return [
            # This replica's own records are older than its memory: left out.
            RemoteConsumers("here", "c1", HERE, (consumer("stale", "q1"),)),
            RemoteConsumers("there", "c7", THERE, (consumer("z", "orders-in"),)),
        ]


class Vhosts:
    mapper = VhostMapper("public", "default", False)

    async def exists(self, vhost: str) -> Namespace | None:
        return None if vhost == "nope" else self.mapper.namespace_for(vhost)

    def name_of(self, namespace: Namespace) -> str:
        return "/" if namespace.namespace == "default" else namespace.namespace


def call(
    user: User, params: Mapping[str, str] | None = None, query: dict[str, str] | None = None
) -> Call:
    context: Any = Context.__new__(Context)
    context.users = Users(
        AcceptAnyone(), MemoryPermissionStore(), superusers=(), monitors=(), authorization=False
    )
    context.local = Local()
    context.directory = Directory()
    context.replica = "here"
    context.vhosts = Vhosts()
    request = Request("GET", "/api/consumers", query=query or {}, peer="t")
    return Call(context, request, user, dict(params or {}))


ADMIN = User("admin", ("administrator",))


async def listed(c: Call) -> list[dict[str, Any]]:
    response = await list_consumers(c)
    assert response.status == 200
    found: list[dict[str, Any]] = json.loads(response.body)
    return found


async def test_every_replicas_consumers_are_listed_in_a_stable_order() -> None:
    found = await listed(call(ADMIN))
    assert [(c["queue"]["vhost"], c["queue"]["name"], c["consumer_tag"]) for c in found] == [
        ("/", "q1", "a"),
        ("/", "q2", "b"),
        ("orders", "orders-in", "z"),
    ]
    assert found[2]["channel_details"]["node"] == "rabbit@there"
    by_tag = await listed(call(ADMIN, query={"sort": "consumer_tag"}))
    assert [c["consumer_tag"] for c in by_tag] == ["a", "b", "z"]


async def test_a_management_user_sees_their_own_connections_consumers() -> None:
    found = await listed(call(User("bob", ("management",))))
    assert [c["consumer_tag"] for c in found] == ["z"]
    monitor = await listed(call(User("carol", ("monitoring",))))
    assert len(monitor) == 3


async def test_a_vhosts_consumers_and_a_missing_vhost() -> None:
    found = await listed(call(ADMIN, {"vhost": "orders"}))
    assert [c["consumer_tag"] for c in found] == ["z"]
    found = await listed(call(ADMIN, {"vhost": "/"}))
    assert [c["consumer_tag"] for c in found] == ["a", "b"]
    with pytest.raises(ApiError) as missing:
        await list_consumers(call(ADMIN, {"vhost": "nope"}))
    assert missing.value.status == 404
    with pytest.raises(ApiError) as empty:  # /api/consumers// names no vhost (RabbitMQ: 404)
        await list_consumers(call(ADMIN, {"vhost": ""}))
    assert empty.value.status == 404


def test_what_a_queues_consumers_may_hold_is_the_sum_of_their_prefetch_counts() -> None:
    assert held_at_most([]) == 0
    assert held_at_most([consumer("a", "q"), consumer("b", "q", prefetch_count=2)]) == 12
    no_ack = consumer("c", "q", ack_required=False, prefetch_count=0)
    assert held_at_most([consumer("a", "q"), no_ack]) == 10
    assert held_at_most([consumer("a", "q", prefetch_count=0)]) == math.inf
