"""A TCP proxy on loopback that a test can cut and restore, to take ZooKeeper away from one
store without touching the shared stack."""

from __future__ import annotations

import trio


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``. ``cut()`` drops every connection and
    refuses new ones (they are accepted and closed at once) until ``restore()``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._scopes: set[trio.CancelScope] = set()
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
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        await trio.serve_listeners(self._handle, listeners, task_status=task_status)

    def cut(self) -> None:
        self.cut_off = True
        for scope in list(self._scopes):
            scope.cancel()

    def restore(self) -> None:
        self.cut_off = False

    async def _handle(self, client: trio.SocketStream) -> None:
        async with client:
            if self.cut_off:
                return
            try:
                server = await trio.open_tcp_stream(*self._target)
            except OSError:
                return
            self.connections += 1
            async with server, trio.open_nursery() as nursery:
                self._scopes.add(nursery.cancel_scope)
                nursery.start_soon(self._pump, client, server, nursery.cancel_scope)
                nursery.start_soon(self._pump, server, client, nursery.cancel_scope)
            self._scopes.discard(nursery.cancel_scope)

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
