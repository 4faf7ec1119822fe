"""gateway/management/http.py over a real loopback socket: keep-alive, 100-continue, HEAD,
and refusals of what a client should not send."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from gateway.management import http
from gateway.management.errors import Response, json_response
from gateway.management.http import ManagementServer, Request

seen: list[Request] = []


async def echo(request: Request) -> Response:
    seen.append(request)
    return json_response(200, {"path": request.path, "body": len(request.body)})


@pytest.fixture
async def port() -> AsyncIterator[int]:
    seen.clear()
    async with trio.open_nursery() as nursery:
        server = ManagementServer("127.0.0.1", 0, echo)
        yield await nursery.start(server.serve)
        nursery.cancel_scope.cancel()


async def exchange(port: int, data: bytes, expect: int = 1) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        received = b""
        with trio.move_on_after(5):
            while received.count(b"HTTP/1.1 ") < expect or not received.endswith(b"}"):
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                received += chunk
        return received


async def test_two_requests_on_one_connection(port: int) -> None:
    request = b"GET /api/a%2Fb?x=1 HTTP/1.1\r\nHost: h\r\nAuthorization: Basic eA==\r\n\r\n"
    answer = await exchange(port, request + request.replace(b"/api/a", b"/api/c"), expect=2)
    assert answer.count(b"HTTP/1.1 200 OK") == 2
    assert [r.path for r in seen] == ["/api/a%2Fb", "/api/c%2Fb"]
    assert seen[0].query == {"x": "1"} and seen[0].headers["authorization"] == "Basic eA=="


async def test_expect_100_continue_and_a_body(port: int) -> None:
    head = b"PUT /q HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(head)
        assert (await stream.receive_some(1024)).startswith(b"HTTP/1.1 100 Continue")
        await stream.send_all(b"hello")
        assert b'"body":5' in await stream.receive_some(1024)


async def test_head_has_no_body(port: int) -> None:
    answer = await exchange(port, b"HEAD /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"\r\n\r\n")


async def test_garbage_and_oversized_bodies_are_400(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await exchange(port, b"NOT HTTP AT ALL\r\n\r\n")).startswith(b"HTTP/1.1 400")
    monkeypatch.setattr(http, "MAX_BODY", 4)
    big = b"PUT /q HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n0123456789"
    answer = await exchange(port, big)
    assert answer.startswith(b"HTTP/1.1 400") and b"body too large" in answer
    assert seen == []
