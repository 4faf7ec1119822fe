"""The accept loop at the open-files limit (gateway/server/accept.py): one clear line per
episode, silent retries, a line when accepting again; other accept errors are not swallowed."""

from __future__ import annotations

import errno
import logging

import pytest
import trio
import trio.testing

from gateway.server.accept import RETRY_DELAY, serve_listener


class FullTable(trio.abc.Listener[trio.abc.Stream]):
    """accept() fails with ``error`` ``failures`` times, then hands out one stream."""

    def __init__(self, failures: int, error: int = errno.EMFILE) -> None:
        self.failures = failures
        self.error = error
        self.attempts = 0
        self.given = False

    async def accept(self) -> trio.abc.Stream:
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise OSError(self.error, "out of it")
        if not self.given:
            self.given = True
            return trio.testing.memory_stream_pair()[0]
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_a_full_descriptor_table_logs_once_and_retries_quietly(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.server")
    listener = FullTable(failures=50)
    handled: list[trio.abc.Stream] = []

    async def handler(stream: trio.abc.Stream) -> None:
        handled.append(stream)

    started = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_listener, listener, handler, nursery, lambda: 7)
        while not handled:
            await trio.sleep(RETRY_DELAY)
        nursery.cancel_scope.cancel()
    # Retries are spaced, not a busy loop.
    assert trio.current_time() - started >= 50 * RETRY_DELAY
    assert listener.attempts == 52  # 50 refused, 1 accepted, 1 waiting when cancelled
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert len(records) == 2, records
    assert records[0][0] == "ERROR"
    assert "Too many open files (EMFILE; open files limit" in records[0][1]
    assert "7 clients connected" in records[0][1]
    assert records[1][0] == "WARNING" and "accepting connections again after 5.0 s" in records[1][1]


async def test_other_accept_errors_are_raised(autojump_clock: trio.testing.MockClock) -> None:
    async def handler(stream: trio.abc.Stream) -> None:
        raise AssertionError("no stream was accepted")

    with pytest.RaisesGroup(pytest.RaisesExc(OSError, check=lambda e: e.errno == errno.EBADF)):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                serve_listener, FullTable(1, errno.EBADF), handler, nursery, lambda: 0
            )
