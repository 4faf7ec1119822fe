"""group_commit.py's window: at most WINDOW groups unanswered; what is submitted meanwhile
waits for an answer and goes as one group. Against a session that answers when told to (the
requests themselves are tested against ZooKeeper in test_group_commit.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import NodeExistsError, RolledBackError
from kazoo.protocol.serialization import Transaction

from gateway.metadata.mixed_read import MixedRead, Read
from gateway.metadata.zookeeper.group_commit import WINDOW, Answer, GroupCommit
from gateway.metadata.zookeeper.ops import Create


class _Result:
    """A kazoo async result the test completes."""

    def __init__(self) -> None:
        self.request: Any = None
        self.value: Any = None
        self.callback: Callable[[Any], None] | None = None

    def get_nowait(self) -> Any:
        if isinstance(self.value, BaseException):
            raise self.value
        return self.value

    def answer(self, value: Any) -> None:
        self.value = value
        assert self.callback is not None
        self.callback(self)


class _Handler:
    @staticmethod
    def async_result() -> _Result:
        return _Result()


class _Client:
    chroot = ""
    default_acl = None
    handler = _Handler()

    def __init__(self) -> None:
        self.sent: list[_Result] = []

    def _call(self, request: Any, result: _Result) -> None:
        result.request = request
        self.sent.append(result)


class _Session:
    """KazooSession's part GroupCommit uses: ``notify`` runs at the end of the turn (here:
    when the test calls ``end_turn``), ``link`` when the test answers."""

    def __init__(self) -> None:
        self.client = _Client()
        self._soon: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def notify(self, fn: Callable[..., None], *args: Any) -> None:
        self._soon.append((fn, args))

    def link(self, result: _Result, apply: Callable[[Any], None]) -> None:
        result.callback = apply

    def end_turn(self) -> None:
        while self._soon:
            fn, args = self._soon.pop(0)
            fn(*args)


def _names(result: _Result) -> list[str]:
    """The paths a sent request creates (a multi) or reads (a multiRead)."""
    request = result.request
    if isinstance(request, Transaction):
        return [op.path.rpartition("/")[2] for op in request.operations]
    assert isinstance(request, MixedRead)
    return [path.rpartition("/")[2] for _, path in request.reads]


def _group() -> tuple[_Session, GroupCommit, list[str]]:
    session = _Session()
    return session, GroupCommit(session), []  # type: ignore[arg-type]


def _write(group: GroupCommit, name: str, log: list[str]) -> None:
    """Submit the creation of ``name``; its answer is logged: the name, with the error of the
    operation or of the whole request if there is one."""

    def deliver(answer: Answer) -> None:
        try:
            results = answer.get_nowait()
        except Exception as error:
            log.append(f"{name}: {type(error).__name__}")
            return
        errors = [type(item).__name__ for item in results if isinstance(item, Exception)]
        log.append(f"{name}: {errors[0]}" if errors else name)

    group.write([Create(f"/n/{name}")], deliver)


def test_alone_a_write_goes_at_the_end_of_its_turn() -> None:
    session, group, log = _group()
    _write(group, "a", log)
    assert session.client.sent == []
    session.end_turn()
    assert [_names(r) for r in session.client.sent] == [["a"]]
    session.client.sent[0].answer(["/n/a"])
    assert log == ["a"]
    assert group.in_flight == 0


def test_what_comes_while_the_window_is_full_waits_and_goes_as_one_group() -> None:
    session, group, log = _group()
    assert WINDOW == 1
    _write(group, "a", log)
    session.end_turn()
    for name in "bcd":  # three later turns, while a's group is unanswered
        _write(group, name, log)
        session.end_turn()
    assert len(session.client.sent) == 1
    assert group.waiting == 3
    session.client.sent[0].answer(["/n/a"])
    assert log == ["a"]
    # Sent at the end of the answer's turn, with what the answer's tasks submit in it.
    _write(group, "e", log)
    session.end_turn()
    assert [_names(r) for r in session.client.sent] == [["a"], ["b", "c", "d", "e"]]
    session.client.sent[1].answer([f"/n/{name}" for name in "bcde"])
    assert log == ["a", "b", "c", "d", "e"]
    assert (group.in_flight, group.waiting) == (0, 0)


def test_reads_count_in_the_window_and_go_after_the_writes_waiting_with_them() -> None:
    session, group, log = _group()
    group.read(Read.DATA, "/n/r1", lambda answer: log.append(f"r1={answer.get_nowait()}"))
    session.end_turn()
    _write(group, "a", log)
    group.read(Read.DATA, "/n/r2", lambda answer: log.append(f"r2={answer.get_nowait()}"))
    session.end_turn()
    assert len(session.client.sent) == 1
    session.client.sent[0].answer([(b"1", 0)])
    session.end_turn()
    assert [_names(r) for r in session.client.sent] == [["r1"], ["a"], ["r2"]]
    session.client.sent[1].answer(["/n/a"])
    session.client.sent[2].answer([(b"2", 0)])
    assert log == ["r1=(b'1', 0)", "a", "r2=(b'2', 0)"]


def test_flush_sends_what_waits_window_or_not() -> None:
    """A request of another kind flushes first (calls.py): it must not overtake what a task
    submitted before it."""
    session, group, log = _group()
    _write(group, "a", log)
    session.end_turn()
    _write(group, "b", log)
    group.flush()
    assert [_names(r) for r in session.client.sent] == [["a"], ["b"]]
    assert group.in_flight == 2


def test_a_failed_group_is_sent_again_before_what_waits() -> None:
    session, group, log = _group()
    _write(group, "a", log)
    _write(group, "b", log)
    session.end_turn()
    _write(group, "c", log)
    session.end_turn()
    # b failed; a was rolled back with it: a goes again alone, then b alone (both
    # submitted before c), and c once they have been answered.
    session.client.sent[0].answer([RolledBackError(), NodeExistsError()])
    session.end_turn()
    assert [_names(r) for r in session.client.sent] == [["a", "b"], ["a"], ["b"]]
    session.client.sent[1].answer(["/n/a"])
    session.client.sent[2].answer([NodeExistsError()])
    session.end_turn()
    assert [_names(r) for r in session.client.sent][3:] == [["c"]]
    session.client.sent[3].answer(["/n/c"])
    assert log == ["a", "b: NodeExistsError", "c"]
    assert group.in_flight == 0


def test_an_error_of_the_whole_request_frees_the_window() -> None:
    session, group, log = _group()
    _write(group, "a", log)
    session.end_turn()
    _write(group, "b", log)
    session.end_turn()
    session.client.sent[0].answer(ConnectionError("lost"))
    session.end_turn()
    assert log == ["a: ConnectionError"]
    assert [_names(r) for r in session.client.sent] == [["a"], ["b"]]
