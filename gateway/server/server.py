"""The listeners and the fleet of connections of one gateway process, and its graceful stop.

amqps listeners wrap each accepted socket in a ``trio.SSLStream`` over the context current at
accept time (``ReloadingContext``: certificates replaced on disk are used for new connections);
the connection does the TLS handshake itself, under its handshake deadline.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from functools import partial

import trio

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.auth.authenticator import Authenticator, PeerIdentity
from gateway.auth.throttle import FailureThrottle
from gateway.auth.tls_reload import ReloadingContext
from gateway.backend.interface import Backend
from gateway.config.address import UNIX_SCHEME, Listener
from gateway.server.accept import serve_listener
from gateway.server.connection import ClientConnection
from gateway.server.listeners import bind_tcp, bind_unix, start_listening
from gateway.server.settings import ServerSettings

log = logging.getLogger("gateway.server")
# Lines about one client connection go to the connections' logger (server/connection.py).
connection_log = logging.getLogger("gateway.connection")

# RabbitMQ's own words when a node shuts down; some clients log them, none parse them.
SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


class StartupError(Exception):
    """The gateway cannot start; the message names what is wrong in one line."""


class GatewayServer:
    def __init__(
        self,
        settings: ServerSettings,
        authenticator: Authenticator,
        backend: Backend,
        *,
        reuse_port: bool = False,
    ) -> None:
        """``reuse_port``: bind with SO_REUSEPORT, so that the other workers of a
        ``--workers N`` gateway can bind the same addresses (see ``listeners.py``).

        The TLS certificate (if any listener is amqps) is loaded here: bad files raise
        ``ConfigError`` naming the key, before anything is bound.
        """
        self._settings = settings
        self._authenticator = authenticator
        self._backend = backend
        self._reuse_port = reuse_port
        self._connections: set[ClientConnection] = set()
        self._stop_requested = trio.Event()
        self._drain_timeout = settings.close_timeout
        # Bound by bind(), listening only once serve() starts: see listeners.py.
        self._sockets: list[trio.socket.SocketType] = []
        # The listener address each socket of _sockets was bound for (its scheme decides TLS).
        self._socket_addresses: list[Listener] = []
        self._unlinked: set[str] = set()
        self._tls = self._load_tls(settings)
        self._throttle = FailureThrottle(max_delay=settings.login_failure_max_delay)
        self.stopped = trio.Event()
        self.bound: list[tuple[str, int]] = []

    @staticmethod
    def _load_tls(settings: ServerSettings) -> ReloadingContext | None:
        if not any(address.tls for address in settings.listeners):
            return None
        if settings.tls is None:
            raise StartupError("amqps listeners need TLS settings (a certificate and key)")
        # time.monotonic, not trio's clock: the server may be built before trio runs.
        return ReloadingContext(settings.tls, time.monotonic())

    @property
    def tls(self) -> ReloadingContext | None:
        """The amqps listeners' certificate source (None without amqps listeners)."""
        return self._tls

    @property
    def listening(self) -> list[Listener]:
        """Each bound socket as its listener, with the real port (port 0 resolved)."""
        return [
            address if address.unix else Listener(address.scheme, host, port)
            for (host, port), address in zip(self.bound, self._socket_addresses, strict=True)
        ]

    @property
    def connections(self) -> frozenset[ClientConnection]:
        return frozenset(self._connections)

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    def request_stop(self, drain_timeout: float | None = None) -> None:
        """Stop: no new connections, Connection.Close 320 to every client, which then has
        ``drain_timeout`` seconds (the close timeout unless given) to answer."""
        if drain_timeout is not None:
            self._drain_timeout = drain_timeout
        self._stop_requested.set()

    async def bind(self) -> list[tuple[str, int]]:
        """Bind every listener address, or raise ``StartupError`` naming the one that failed.

        Connections are not accepted yet (the kernel refuses them): ``serve`` starts
        listening, so a gateway can load its vhosts between the two and never let a client in
        before it is ready. Port 0 gets a port from the kernel here; ``bound`` has it.
        """
        if not self._sockets:
            sockets: list[trio.socket.SocketType] = []
            addresses: list[Listener] = []
            try:
                for address in self._settings.listeners:
                    bound = await self._bind(address)
                    sockets.extend(bound)
                    addresses.extend([address] * len(bound))
            except BaseException:
                for sock in sockets:
                    sock.close()
                raise
            self._sockets = sockets
            self._socket_addresses = addresses
            # A Unix socket's name is its path: (path, 0) keeps the (host, port) shape.
            self.bound = [
                (address.path, 0) if address.unix else sock.getsockname()[:2]
                for sock, address in zip(sockets, addresses, strict=True)
            ]
        return self.bound

    def close_sockets(self) -> None:
        """Close what ``bind`` opened when ``serve`` will not run (start-up failed)."""
        for sock, address in zip(self._sockets, self._socket_addresses, strict=True):
            sock.close()
            if address.unix and address.path not in self._unlinked:
                # The socket file would refuse connections forever: remove it with the socket.
                self._unlinked.add(address.path)
                with contextlib.suppress(OSError):
                    os.unlink(address.path)

    async def serve(
        self, *, task_status: trio.TaskStatus[list[tuple[str, int]]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until ``request_stop``; ``task_status`` reports the bound (host, port) pairs,
        once the kernel queues connections for this process."""
        await self.bind()
        listeners: list[trio.SocketListener] = []
        try:
            for (host, port), sock, address in zip(
                self.bound, self._sockets, self._socket_addresses, strict=True
            ):
                try:
                    listeners.append(start_listening(sock))
                except OSError as error:
                    # Linux lets two SO_REUSEADDR sockets bind one port while neither listens;
                    # the second to listen is refused here.
                    raise StartupError(
                        f"cannot listen on {address.scheme}://{host}:{port}: "
                        f"{error.strerror or error}"
                    ) from None
            async with trio.open_nursery() as connections:
                async with trio.open_nursery() as acceptors:
                    for listener, address in zip(listeners, self._socket_addresses, strict=True):
                        acceptors.start_soon(
                            serve_listener,
                            listener,
                            partial(self._handle_stream, tls=address.tls, unix=address.unix),
                            connections,
                            lambda: len(self._connections),
                        )
                    log.info("listening on %s", ", ".join(map(str, self.listening)))
                    task_status.started(self.bound)
                    await self._stop_requested.wait()
                    acceptors.cancel_scope.cancel()
                # Stop accepting at the socket too, so that nobody waits in the backlog.
                for listener in listeners:
                    await trio.aclose_forcefully(listener)
                await self._drain()
                connections.cancel_scope.cancel()
        finally:
            for listener in listeners:
                await trio.aclose_forcefully(listener)
            self.close_sockets()
            self.stopped.set()
        log.info("stopped")

    async def _bind(self, address: Listener) -> list[trio.socket.SocketType]:
        if address.scheme not in ("amqp", "amqps", UNIX_SCHEME):
            raise StartupError(
                f"{address}: unknown listener scheme (amqp://, amqps:// or amqp+unix://)"
            )
        try:
            if address.unix:
                if self._reuse_port:
                    raise StartupError(f"{address}: --workers cannot share a Unix socket")
                return [await bind_unix(address.path)]
            return await bind_tcp(address.host, address.port, reuse_port=self._reuse_port)
        except OSError as error:
            raise StartupError(f"cannot listen on {address}: {error.strerror or error}") from None

    async def _drain(self) -> None:
        """Send Connection.Close 320 to every client and give them the drain timeout to answer."""
        if not self._connections:
            return
        log.info("closing %d connection(s)", len(self._connections))
        shutdown = AMQPError(ReplyCode.CONNECTION_FORCED, SHUTDOWN_TEXT)
        for connection in list(self._connections):
            await connection.request_close(shutdown)
        with trio.move_on_after(self._drain_timeout):
            for connection in list(self._connections):
                await connection.finished.wait()

    async def _handle_stream(
        self, stream: trio.SocketStream, *, tls: bool = False, unix: bool = False
    ) -> None:
        try:
            if unix:
                # The relay's end of a Unix socket has no name worth logging: say which socket.
                peer_host = None
                peer = PeerIdentity(address=f"unix:{stream.socket.getsockname()}")
            else:
                peer_host, port = stream.socket.getpeername()[:2]
                peer = PeerIdentity(address=f"{peer_host}:{port}")
        except OSError:
            # The client hung up between accept and here; there is nobody to serve. A load
            # balancer's TCP health check does exactly this (HAProxy resets it at once): a
            # DEBUG line like any other health check's, never an INFO one.
            connection_log.debug("connection closed peer=? reason=hung up before it was served")
            await trio.aclose_forcefully(stream)
            return
        served: trio.abc.Stream = stream
        if tls:
            assert self._tls is not None  # _load_tls refuses amqps listeners without TLS
            served = trio.SSLStream(stream, self._tls.current(time.monotonic()), server_side=True)
        connection = ClientConnection(
            served,
            self._settings,
            self._authenticator,
            self._backend,
            peer,
            throttle=self._throttle,
            proxy_header=self._settings.proxy_trust.trusts(peer_host),
        )
        self._connections.add(connection)
        try:
            await connection.run()
        except Exception:
            # One connection's bug must never take the listener down with it.
            log.exception("connection from %s failed", peer.address)
        finally:
            self._connections.discard(connection)
