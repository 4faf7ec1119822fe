"""TCP proxies a synchronous test cuts and restores: tests/support/tcp_proxy.py's
``TcpProxy`` run by trio in a thread of its own, for gateway processes to connect through
(to ZooKeeper, to Pulsar's admin API)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import trio
import trio.from_thread

from tests.support.tcp_proxy import TcpProxy


class ProxyThread:
    """One ``TcpProxy`` to ``host:port``; ``cut()`` drops its connections and refuses new
    ones until ``restore()``; ``isolate()`` does that to one process's connections only."""

    def __init__(self, host: str, port: int, *, listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self._proxy = TcpProxy(host, port, listen=listen)
        self._token: trio.lowlevel.TrioToken | None = None
        self._started = threading.Event()
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    @property
    def port(self) -> int:
        return self._proxy.port

    @property
    def connections(self) -> int:
        """How many connections it has forwarded so far."""
        return self._proxy.connections

    def __enter__(self) -> ProxyThread:
        self._thread.start()
        if not self._started.wait(30):
            raise AssertionError("the TCP proxy did not start within 30 s")
        return self

    def __exit__(self, *_exc: object) -> None:
        trio.from_thread.run_sync(self._stopping, trio_token=self._token)
        self._thread.join(30)

    def _stopping(self) -> None:
        assert self._stop is not None
        self._stop.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(self._proxy.run)
            self._started.set()
            await self._stop.wait()
            self._proxy.cut()
            nursery.cancel_scope.cancel()

    def cut(self) -> None:
        trio.from_thread.run_sync(self._proxy.cut, trio_token=self._token)

    def isolate(self, belongs: Callable[[int], bool]) -> None:
        """Drop and refuse only the connections whose peer's port ``belongs`` (to a process
        being partitioned off); the others go on."""
        trio.from_thread.run_sync(self._proxy.isolate, belongs, trio_token=self._token)

    def restore(self) -> None:
        trio.from_thread.run_sync(self._proxy.restore, trio_token=self._token)
