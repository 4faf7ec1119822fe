"""Run a GatewayServer on its own trio loop in a thread, so that blocking clients can talk to it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import trio

from gateway.auth.authenticator import AcceptAnyone, Authenticator
from gateway.backend.interface import Backend
from gateway.backend.unsupported import UnsupportedBackend
from gateway.server.address import Listener
from gateway.server.server import GatewayServer
from gateway.server.settings import ServerSettings

START_TIMEOUT = 60.0
# How long a stopping gateway waits for its clients to answer Connection.Close: a test's
# blocking clients left open answer only when the test calls them again, which it will not, so
# the server's full close timeout (2 s) would be spent on every stop for nothing.
STOP_DRAIN_TIMEOUT = 0.2


class GatewayInThread:
    def __init__(
        self,
        settings: ServerSettings | None = None,
        *,
        authenticator: Authenticator | None = None,
        backend: Backend | None = None,
        backend_factory: Callable[[], AbstractAsyncContextManager[Backend]] | None = None,
    ) -> None:
        """``backend_factory`` builds the backend inside the gateway's own trio loop (a real
        backend's clients belong to the loop that created them)."""
        self.settings = settings or ServerSettings(listeners=(Listener("amqp", "127.0.0.1", 0),))
        self._authenticator = authenticator or AcceptAnyone()
        self._backend_factory = backend_factory
        self.server = GatewayServer(
            self.settings, self._authenticator, backend or UnsupportedBackend()
        )
        self.port = 0
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="gateway", daemon=True)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:  # reported to the test thread by start()/stop()
            self._error = error
            self._started.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        if self._backend_factory is None:
            await self._serve()
            return
        async with self._backend_factory() as backend:
            self.server = GatewayServer(self.settings, self._authenticator, backend)
            await self._serve()

    async def _serve(self) -> None:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(self.server.serve)
            self.port = bound[0][1]
            self._started.set()

    def start(self) -> GatewayInThread:
        self._thread.start()
        if not self._started.wait(START_TIMEOUT) or self._error is not None:
            raise RuntimeError(f"gateway did not start: {self._error!r}")
        return self

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` on the gateway's loop (for inspecting or steering it from a test)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def call_async(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Await ``fn`` on the gateway's loop (e.g. a connection's ``request_close``)."""
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    def stop(self, timeout: float = 30.0, drain_timeout: float = STOP_DRAIN_TIMEOUT) -> None:
        if self._thread.is_alive():
            # A stop requested earlier (e.g. by the test) may have ended trio's run while the
            # thread is still unwinding: then there is nothing left to ask, only to wait for.
            with contextlib.suppress(trio.RunFinishedError):
                self.call(self.server.request_stop, drain_timeout)
            self._thread.join(timeout)
            assert not self._thread.is_alive(), "gateway did not stop in time"
        if self._error is not None:
            raise self._error

    def __enter__(self) -> GatewayInThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
