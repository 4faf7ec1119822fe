"""gateway/management/api.py: RabbitMQ's paths to handlers, and the order a request is judged
in (404, 405, 401, then the handler); nothing a handler raises reaches the client as a
traceback."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from gateway.auth.authenticator import AcceptAnyone
from gateway.management import api
from gateway.management.api import ManagementApi, _match, _segments
from gateway.management.context import Call, Context
from gateway.management.errors import ApiError, Response
from gateway.management.http import Request
from gateway.management.users import Users
from gateway.metadata.permissions import MemoryPermissionStore

AUTH = {"authorization": "Basic " + base64.b64encode(b"guest:guest").decode()}


def test_segments_are_decoded_one_by_one() -> None:
    assert _segments("/api/queues/%2F/a%2Fb") == ["api", "queues", "/", "a/b"]
    assert _segments("/api/connections/") == ["api", "connections"]
    with pytest.raises(ApiError):
        _segments("/api/queues/%C3%28")


def test_routes() -> None:
    found = _match(["api", "bindings", "/", "e", "x", "q", "y", "~"])
    assert found is not None
    assert found[1] == {"vhost": "/", "source": "x", "kind": "q", "destination": "y", "props": "~"}
    assert _match(["api", "bindings", "/", "e", "x", "z", "y"]) is None  # kind is q or e
    assert _match(["api", "exchanges", "/", "x", "bindings", "source"]) is not None
    assert _match(["api", "exchanges", "/", "x", "bindings", "sideways"]) is None


def app() -> ManagementApi:
    users = Users(
        AcceptAnyone(), MemoryPermissionStore(), superusers=(), monitors=(), authorization=False
    )
    context: Any = Context.__new__(Context)
    context.users = users
    return ManagementApi(context)


async def answer(method: str, path: str, headers: dict[str, str] | None = None) -> Response:
    return await app()(Request(method, path, headers=headers or {}, peer="t"))


async def test_whoami_and_the_order_of_refusals() -> None:
    ok = await answer("GET", "/api/whoami", AUTH)
    assert (ok.status, json.loads(ok.body)) == (200, {"name": "guest", "tags": ["administrator"]})
    assert (await answer("GET", "/api/nothing")).status == 404
    wrong = await answer("POST", "/api/whoami")
    assert (wrong.status, dict(wrong.headers)["allow"]) == (405, "GET, HEAD, OPTIONS")
    anonymous = await answer("GET", "/api/whoami")
    assert (anonymous.status, anonymous.body) == (401, b"")
    assert dict(anonymous.headers)["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert (await answer("OPTIONS", "/api/whoami")).status == 200


async def test_a_handler_that_fails_is_a_500_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(call: Call) -> Response:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(api, "_COMPILED", [(("api", "broken"), {"GET": broken})])
    response = await answer("GET", "/api/broken", AUTH)
    assert response.status == 500
    assert b"secret internals" not in response.body
    assert json.loads(response.body)["error"] == "internal_server_error"
