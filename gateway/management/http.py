"""The management listener's HTTP/1.1 server: trio streams, h11 for the protocol.

h11 (already under httpx) parses and frames; this module only moves bytes and bounds what a
client may cost: a request's head and body are limited in size (a definitions import is the
largest thing sent), and a client gets ``REQUEST_TIMEOUT`` seconds per request and
``IDLE_TIMEOUT`` between keep-alive requests, so a slow or hostile client cannot hold a task
forever. Connections are kept alive as HTTP/1.1 clients expect (Go's net/http, httpx); each
request is answered before the next is read.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl

import h11
import trio

from gateway.management.errors import Response, bad_request
from gateway.server.listeners import bind_tcp, start_listening

log = logging.getLogger("gateway.management")

__all__ = ["ManagementServer", "Request"]

MAX_BODY = 64 * 1024 * 1024
MAX_HEAD = 64 * 1024
REQUEST_TIMEOUT = 60.0
IDLE_TIMEOUT = 120.0
READ_SIZE = 65536


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # still percent-encoded: each segment is decoded on its own (api.py)
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names
    body: bytes = b""
    peer: str = ""


Handler = Callable[[Request], Awaitable[Response]]


class _TooLarge(Exception):
    pass


class ManagementServer:
    """``handler`` answers each request; ``tls`` wraps every connection (https)."""

    def __init__(
        self,
        host: str,
        port: int,
        handler: Handler,
        *,
        tls: ssl.SSLContext | None = None,
        reuse_port: bool = False,
    ) -> None:
        self._host = host
        self._port = port
        self._handler = handler
        self._tls = tls
        self._reuse_port = reuse_port
        self.port = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status`` gets the bound port. ``--workers``'
        workers bind one port with SO_REUSEPORT: any of them answers for the fleet."""
        sockets = await bind_tcp(self._host or "0.0.0.0", self._port, reuse_port=self._reuse_port)
        listeners = [start_listening(sock) for sock in sockets]
        self.port = sockets[0].getsockname()[1]
        scheme = "https" if self._tls is not None else "http"
        log.info("management API on %s://%s:%d", scheme, self._host or "0.0.0.0", self.port)
        task_status.started(self.port)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "?"
        served: trio.abc.Stream = stream
        try:
            if self._tls is not None:
                served = trio.SSLStream(stream, self._tls, server_side=True)
                with trio.move_on_after(REQUEST_TIMEOUT):
                    await served.do_handshake()
            await self._requests(served, peer)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the client went away
        except Exception:
            log.exception("management API: a connection from %s failed", peer)
        finally:
            await trio.aclose_forcefully(served)

    async def _requests(self, stream: trio.abc.Stream, peer: str) -> None:
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        while True:
            timeout = IDLE_TIMEOUT if connection.their_state is h11.IDLE else REQUEST_TIMEOUT
            try:
                with trio.fail_after(timeout):
                    request = await _read_request(connection, stream, peer)
            except trio.TooSlowError:
                return
            except _TooLarge:
                await _send(connection, stream, "POST", bad_request("body too large").response())
                return
            except h11.RemoteProtocolError as error:
                reply = bad_request(f"malformed HTTP request: {error}").response()
                with contextlib.suppress(h11.LocalProtocolError):
                    await _send(connection, stream, "GET", reply)
                return
            if request is None:
                return
            response = await self._handler(request)
            await _send(connection, stream, request.method, response)
            if connection.our_state is h11.MUST_CLOSE or connection.their_state is h11.MUST_CLOSE:
                return
            try:
                connection.start_next_cycle()
            except h11.LocalProtocolError:
                return


async def _read_request(
    connection: h11.Connection, stream: trio.abc.Stream, peer: str
) -> Request | None:
    """The next whole request, or None when the client closed the connection."""
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            if head is not None and connection.they_are_waiting_for_100_continue:
                await stream.send_all(
                    connection.send(
                        h11.InformationalResponse(status_code=100, headers=[], reason=b"Continue")
                    )
                )
            connection.receive_data(bytes(await stream.receive_some(READ_SIZE)))
            continue
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise _TooLarge
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = head.target.decode("latin-1")
            path, _, query = target.partition("?")
            return Request(
                method=head.method.decode("ascii", "replace").upper(),
                path=path,
                query=dict(parse_qsl(query, keep_blank_values=True)),
                headers={
                    name.decode("latin-1").lower(): value.decode("latin-1")
                    for name, value in head.headers
                },
                body=bytes(body),
                peer=peer,
            )
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def _send(
    connection: h11.Connection, stream: trio.abc.Stream, method: str, response: Response
) -> None:
    headers = [("content-length", str(len(response.body))), ("server", "Starlight for RabbitMQ")]
    if response.content_type is not None:
        headers.append(("content-type", response.content_type))
    headers.extend(response.headers)
    try:
        reason = HTTPStatus(response.status).phrase.encode()
    except ValueError:
        reason = b""
    data = connection.send(
        h11.Response(status_code=response.status, headers=headers, reason=reason)
    )
    if method != "HEAD" and response.body:
        data += connection.send(h11.Data(data=response.body))
    data += connection.send(h11.EndOfMessage())
    await stream.send_all(data)
