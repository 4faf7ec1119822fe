"""The accept loop at the open-files limit (gateway/server/accept.py): one clear line per
episode, silent retries, a line when accepting again; other accept errors are not swallowed."""

from __future__ import annotations

import errno
import logging

import pytest
import trio
import trio.testing

from gateway.server import accept
from gateway.server.accept import RETRY_DELAY, near_the_limit, reserve_for, serve_listener


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


def test_far_from_the_limit_nothing_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    def listing(path: str) -> list[str]:
        raise AssertionError(f"{path} listed")

    monkeypatch.setattr(accept, "_open_files_limit", lambda: 1_000_000)
    monkeypatch.setattr(accept.os, "listdir", listing)
    assert near_the_limit(connected=10) is None


@pytest.mark.parametrize(("limit", "reserve"), [(64, 16), (256, 32), (1024, 64), (65536, 64)])
def test_the_reserve_grows_with_the_limit_up_to_64(limit: int, reserve: int) -> None:
    assert reserve_for(limit) == reserve


def test_the_last_descriptors_are_kept_from_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    in_use = 0
    monkeypatch.setattr(accept, "_open_files_limit", lambda: 256)
    monkeypatch.setattr(accept.os, "listdir", lambda path: ["fd"] * in_use)
    in_use = 256 - 33
    assert near_the_limit(connected=200) is None
    in_use = 256 - 32
    assert near_the_limit(connected=200) == (224, 256)


async def test_near_the_limit_the_loop_waits_without_accepting(
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.server")
    checks = 0

    def near(connected: int, margin: int) -> tuple[int, int] | None:
        nonlocal checks
        checks += 1
        return (240, 256) if checks <= 30 else None

    monkeypatch.setattr(accept, "near_the_limit", near)
    listener = FullTable(failures=0)
    handled: list[trio.abc.Stream] = []

    async def handler(stream: trio.abc.Stream) -> None:
        handled.append(stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_listener, listener, handler, nursery, lambda: 200)
        while not handled:
            await trio.sleep(RETRY_DELAY)
        nursery.cancel_scope.cancel()
    assert listener.attempts == 2  # none while near the limit: 1 accepted, 1 waiting
    records = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in records] == ["ERROR", "WARNING"], records
    assert "240 of 256 open files in use, the last 32 kept" in records[0][1]
    assert "200 clients connected" in records[0][1]
    assert "accepting connections again after 3.0 s" in records[1][1]


def test_accepting_resumes_only_past_a_margin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(accept, "_open_files_limit", lambda: 256)
    monkeypatch.setattr(accept.os, "listdir", lambda path: ["fd"] * (256 - 33))
    assert near_the_limit(connected=200) is None
    assert near_the_limit(connected=200, margin=accept.RESUME_MARGIN) == (223, 256)
