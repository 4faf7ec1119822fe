"""The HTTP listener of ``metricsListener``: /metrics, /healthz and /readyz.

A deliberately small HTTP/1.1 server on trio (GET and HEAD, one request per connection, then
close): Prometheus, the kubelet and HAProxy need nothing more, and it runs in the gateway's own
trio loop without a thread. Requests are bounded in size and time so that a slow or hostile
client cannot hold the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

log = logging.getLogger("gateway.metrics")

__all__ = ["CONTENT_TYPE", "Endpoints", "MetricsServer"]

#: The Prometheus text exposition format, version 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_REQUEST = 8192
REQUEST_TIMEOUT = 10.0


@dataclass(frozen=True)
class Endpoints:
    """What the three paths answer."""

    metrics: Callable[[], Awaitable[bytes]]
    # (ready, one-line text naming what is not ready)
    readiness: Callable[[], Awaitable[tuple[bool, str]]]


class MetricsServer:
    def __init__(self, host: str, port: int, endpoints: Endpoints) -> None:
        self._host = host
        self._port = port
        self._endpoints = endpoints
        self.port = 0  # the bound port once serving (port 0 picks a free one)

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status`` gets the bound port."""
        listeners = await trio.open_tcp_listeners(self._port, host=self._host or None)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("metrics and health on http://%s:%d", self._host or "0.0.0.0", self.port)
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT):
                request = await _read_request(stream)
                if request is None:
                    return
                method, path = request
                status, content_type, body = await self._answer(method, path)
                head = (
                    f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                ).encode()
                await stream.send_all(head if method == "HEAD" else head + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client went away
        except Exception:
            log.exception("metrics endpoint: answering a request failed")
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(self, method: str, path: str) -> tuple[str, str, bytes]:
        if method not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET and HEAD\n"
        path = path.split("?", 1)[0]
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE, await self._endpoints.metrics()
        if path == "/healthz":
            # The process answers: it is alive (the kubelet restarts it when this fails).
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            ready, text = await self._endpoints.readiness()
            status = "200 OK" if ready else "503 Service Unavailable"
            return status, "text/plain", text.encode()
        return "404 Not Found", "text/plain", b"not found: try /metrics, /healthz, /readyz\n"


async def _read_request(stream: trio.SocketStream) -> tuple[str, str] | None:
    """(method, path) of the request line once the headers are in; None if malformed."""
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    line = data.split(b"\n", 1)[0].decode("latin-1").strip()
    parts = line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return None
    return parts[0], parts[1]
