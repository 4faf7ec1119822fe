"""The metrics HTTP listener on a real loopback socket, and the readiness checks."""

from __future__ import annotations

import pytest
import trio

from gateway.observability.health import Health
from gateway.observability.http import Endpoints, MetricsServer


async def get(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        return data


@pytest.mark.trio
async def test_paths_and_statuses() -> None:
    health = Health()
    ready = {"metadata": False}
    health.add("metadata", lambda: ready["metadata"])

    async def metrics() -> bytes:
        return b"up 1\n"

    async def readiness() -> tuple[bool, str]:
        return health.readiness()

    server = MetricsServer("127.0.0.1", 0, Endpoints(metrics, readiness))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(server.serve)
        with trio.fail_after(10):
            answer = await get(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"version=0.0.4" in answer and answer.endswith(b"\r\n\r\nup 1\n")
            assert (await get(port, b"GET /healthz HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
            answer = await get(port, b"GET /readyz HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 503")
            assert answer.endswith(b"not ready: metadata\n")
            ready["metadata"] = True
            assert (await get(port, b"GET /readyz HTTP/1.0\r\n\r\n")).endswith(b"\r\nready\n")
            health.draining = True
            assert (await get(port, b"GET /readyz HTTP/1.1\r\n\r\n")).endswith(
                b"not ready: not_draining\n"
            )
            assert (await get(port, b"GET /x HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
            assert (await get(port, b"DELETE /metrics HTTP/1.1\r\n\r\n")).startswith(
                b"HTTP/1.1 405"
            )
            head = await get(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert head.endswith(b"\r\n\r\n")  # headers only
            assert await get(port, b"garbage\r\n\r\n") == b""  # closed, no answer
        nursery.cancel_scope.cancel()


def test_a_check_that_raises_is_a_failure() -> None:
    health = Health()

    def broken() -> bool:
        raise RuntimeError("cannot tell")

    health.add("zookeeper", broken)
    assert health.readiness() == (False, "not ready: zookeeper\n")
