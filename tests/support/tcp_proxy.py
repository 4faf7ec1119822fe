"""A TCP proxy on loopback that a test can cut and restore, to take ZooKeeper away from one
store without touching the shared stack."""

from __future__ import annotations

from collections.abc import Callable

import trio


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` (or ``listen``) to ``target``. ``cut()`` drops every
    connection and refuses new ones (they are accepted and closed at once) until ``restore()``;
    ``isolate(belongs)`` does that only to the connections whose peer's port ``belongs``."""

    def __init__(
        self, target_host: str, target_port: int, *, listen: tuple[str, int] = ("127.0.0.1", 0)
    ) -> None:
        self._target = (target_host, target_port)
        self._listen = listen
        self._scopes: dict[trio.CancelScope, int] = {}  # -> the peer's port
        self._isolated: Callable[[int], bool] | None = None
        self.cut_off = False
        self.port = 0
        self.connections = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def run(
        self,
        *,
        task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        listeners = await trio.open_tcp_listeners(self._listen[1], host=self._listen[0])
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    def cut(self) -> None:
        self.cut_off = True
        for scope in list(self._scopes):
            scope.cancel()

    def isolate(self, belongs: Callable[[int], bool]) -> None:
        self._isolated = belongs
        for scope, peer in list(self._scopes.items()):
            if belongs(peer):
                scope.cancel()

    def restore(self) -> None:
        self.cut_off = False
        self._isolated = None

    async def _handle(self, client: trio.SocketStream) -> None:
        peer = client.socket.getpeername()[1]
        async with client:
            if self.cut_off or (self._isolated is not None and self._isolated(peer)):
                return
            try:
                server = await trio.open_tcp_stream(*self._target)
            except OSError:
                return
            self.connections += 1
            async with server, trio.open_nursery() as nursery:
                self._scopes[nursery.cancel_scope] = peer
                nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, nursery.cancel_scope)
            self._scopes.pop(nursery.cancel_scope, None)

    @staticmethod
    async def _pump(
        source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
    ) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        scope.cancel()  # one side closed: close both
