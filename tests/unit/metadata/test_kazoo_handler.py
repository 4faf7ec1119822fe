"""TrioHandler: select's contract on poll, and direct callbacks that skip kazoo's threads."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from kazoo.protocol.states import Callback

from gateway.metadata.kazoo_handler import TrioHandler, direct


@pytest.fixture
def handler() -> Iterator[TrioHandler]:
    handler = TrioHandler()
    handler.start()
    yield handler
    handler.stop()


def test_select_reports_what_is_ready(handler: TrioHandler) -> None:
    left, right = socket.socketpair()
    with left, right:
        assert handler.select([left], [], [], 0) == ([], [], [])
        assert handler.select([left], [right], [], 0) == ([], [right], [])
        right.send(b"x")
        assert handler.select([left, right], [], [], 1) == ([left], [], [])
        # The same set again reuses the thread's poll object, and still sees the state.
        assert handler.select([left, right], [], [], 1) == ([left], [], [])
        left.recv(1)
        assert handler.select([left, right], [], [], 0) == ([], [], [])


def test_select_reports_a_closed_peer_as_readable(handler: TrioHandler) -> None:
    left, right = socket.socketpair()
    with left:
        right.close()
        assert handler.select([left], [], [], 1)[0] == [left]
        assert left.recv(1) == b""


def test_select_takes_file_descriptor_numbers(handler: TrioHandler) -> None:
    left, right = socket.socketpair()
    with left, right:
        right.send(b"x")
        assert handler.select([left.fileno()], [], [], 1)[0] == [left.fileno()]


def test_select_refuses_a_negative_timeout(handler: TrioHandler) -> None:
    with pytest.raises(ValueError):
        handler.select([], [], [], -1)


def test_a_direct_callback_runs_on_the_thread_that_sets_the_result(
    handler: TrioHandler,
) -> None:
    result = handler.async_result()
    ran_on: list[str] = []
    order: list[int] = []

    def first(_result: object) -> None:
        ran_on.append(threading.current_thread().name)
        order.append(1)

    result.rawlink(direct(first))
    result.rawlink(direct(lambda r: order.append(2)))
    setter = threading.Thread(target=result.set, args=(42,), name="setter")
    setter.start()
    setter.join()
    assert ran_on == ["setter"]
    assert order == [1, 2]
    assert result.get_nowait() == 42


def test_a_callback_not_marked_goes_to_the_completion_thread(handler: TrioHandler) -> None:
    result = handler.async_result()
    done = threading.Event()
    ran_on: list[str] = []

    def callback(_result: object) -> None:
        ran_on.append(threading.current_thread().name)
        done.set()

    result.rawlink(callback)
    result.set(1)
    assert done.wait(10)
    assert ran_on != [threading.current_thread().name]


def test_a_direct_callback_that_raises_is_logged_not_raised(
    handler: TrioHandler, caplog: pytest.LogCaptureFixture
) -> None:
    result = handler.async_result()
    result.rawlink(direct(lambda r: 1 / 0))
    result.set(None)  # no exception here: the connection loop would die of it
    assert "a ZooKeeper callback failed" in caplog.text


def test_a_direct_watch_runs_at_once(handler: TrioHandler) -> None:
    seen: list[object] = []
    handler.dispatch_callback(Callback("watch", direct(lambda e: seen.append(e)), ("event",)))
    assert seen == ["event"]
