"""group_commit.py: the transactions (and reads) submitted in one turn of trio go in one
request, each member still gets the answer its own transaction would have had, and at most
WINDOW requests are unanswered at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import Transaction

from gateway.metadata.mixed_read import MISSING, MixedRead, Read
from gateway.metadata.store import MetadataUnavailable
from gateway.metadata.zookeeper.calls import Failure, Reply
from gateway.metadata.zookeeper.group_commit import (
    READS,
    WINDOW,
    Answer,
    GroupCommit,
    _fitting,
    _member_of,
    _Write,
    failed_index,
)
from gateway.metadata.zookeeper.ops import TXN_OPS, Check, Create, Delete, Op
from tests.unit.metadata.conftest import Parts

zk = pytest.mark.integration


def _ignore(answer: Answer) -> None:
    pass


def test_failed_index_skips_the_rolled_back_operations() -> None:
    assert failed_index(["/a", True]) is None
    assert failed_index([RolledBackError(), NodeExistsError(), RuntimeInconsistency()]) == 1
    assert failed_index([]) is None


def test_an_answer_gives_its_value_or_raises_the_whole_requests_error() -> None:
    assert Answer(["/a"]).get_nowait() == ["/a"]
    with pytest.raises(NoNodeError):
        Answer(error=NoNodeError()).get_nowait()


def test_member_of_finds_the_member_holding_an_operation() -> None:
    group = [_Write([Create("/a")], _ignore), _Write([Create("/b"), Delete("/c")], _ignore)]
    assert [_member_of(group, index) for index in range(3)] == [0, 1, 1]
    with pytest.raises(ValueError):
        _member_of(group, 3)


def test_groups_are_cut_where_a_multi_would_be_too_big() -> None:
    ops: list[Op] = [Check("/x")] * (TXN_OPS // 2)
    writes = [_Write(ops, _ignore) for _ in range(3)]
    assert [len(group) for group in _fitting(writes)] == [2, 1]
    big = _Write([Create("/big", b"x" * 400_000)], _ignore)
    assert [len(group) for group in _fitting([big, big])] == [1, 1]
    assert _fitting([]) == []


def _submit(parts: Parts, ops: list[Op], log: list[str], name: str) -> Reply[Failure | None]:
    return parts.calls.submit_transaction(
        name, ops, lambda: log.append(f"{name} ok"), lambda i, e: log.append(f"{name} failed")
    )


@zk
async def test_transactions_of_one_turn_go_in_one_multi(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.ensure_path(zk_prefix)
    group = parts.calls.group
    before = group.requests
    log: list[str] = []
    replies = [
        _submit(parts, [Create(f"{zk_prefix}/n{i}", b"%d" % i)], log, f"t{i}") for i in range(5)
    ]
    for reply in replies:
        assert await parts.calls.wait(reply, "create") is None
    assert group.requests == before + 1
    assert log == [f"t{i} ok" for i in range(5)]  # applied in the order submitted
    assert [raw.get(f"{zk_prefix}/n{i}")[0] for i in range(5)] == [b"%d" % i for i in range(5)]


@zk
async def test_a_failing_member_gets_its_own_answer_and_the_others_commit(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.ensure_path(f"{zk_prefix}/taken")
    log: list[str] = []
    replies = [
        _submit(parts, [Create(f"{zk_prefix}/a")], log, "a"),
        _submit(parts, [Create(f"{zk_prefix}/b"), Create(f"{zk_prefix}/taken")], log, "taken"),
        _submit(parts, [Create(f"{zk_prefix}/c")], log, "c"),
        _submit(parts, [Delete(f"{zk_prefix}/none")], log, "none"),
        _submit(parts, [Create(f"{zk_prefix}/d")], log, "d"),
    ]
    answers = [await parts.calls.wait(reply, "write") for reply in replies]
    assert answers[0] is None and answers[2] is None and answers[4] is None
    failure = answers[1]
    assert failure is not None and failure[0] == 1 and isinstance(failure[1], NodeExistsError)
    failure = answers[3]
    assert failure is not None and failure[0] == 0 and isinstance(failure[1], NoNodeError)
    assert log == ["a ok", "taken failed", "c ok", "none failed", "d ok"]
    for name in "acd":
        assert raw.exists(f"{zk_prefix}/{name}") is not None
    assert raw.exists(f"{zk_prefix}/b") is None  # its transaction failed whole


@zk
async def test_two_members_creating_one_node_one_wins_the_other_is_told_it_exists(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    """The second's NodeExists in the multi comes from the first's create, which the failure
    rolls back: the first must still commit, and the second be told by ZooKeeper itself."""
    raw.ensure_path(zk_prefix)
    log: list[str] = []
    first = _submit(parts, [Create(f"{zk_prefix}/x", b"1")], log, "first")
    second = _submit(parts, [Create(f"{zk_prefix}/x", b"2")], log, "second")
    assert await parts.calls.wait(first, "create") is None
    failure = await parts.calls.wait(second, "create")
    assert failure is not None and isinstance(failure[1], NodeExistsError)
    assert raw.get(f"{zk_prefix}/x")[0] == b"1"
    assert log == ["first ok", "second failed"]


@zk
async def test_reads_of_one_turn_go_in_one_multiread(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.create(f"{zk_prefix}/there/child", b"c", makepath=True)
    raw.set(f"{zk_prefix}/there", b"data")
    group = parts.calls.group
    before = group.requests
    answers: list[object] = []
    reads = [
        (Read.DATA, "there"),
        (Read.DATA, "none"),
        (Read.CHILDREN, "there"),
        (Read.CHILDREN, "none"),
    ]
    for kind, name in reads:
        group.read(kind, f"{zk_prefix}/{name}", lambda answer: answers.append(answer.get_nowait()))
    # The calls' reads go through the same group, after those submitted before them.
    children = parts.calls.submit_children(f"{zk_prefix}/there", "list")
    assert await parts.calls.read_data(f"{zk_prefix}/there", "read") == (b"data", 1)
    assert await parts.calls.wait(children, "list") == ["child"]
    assert group.requests == before + 1
    assert answers == [(b"data", 1), MISSING, ["child"], MISSING]
    assert READS >= 100


@zk
async def test_a_request_outside_the_group_is_sent_after_it(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    """A listing submitted after a transaction, without awaiting it, is answered after it:
    submit() flushes the group first."""
    raw.ensure_path(zk_prefix)
    reply = parts.calls.submit_transaction("create", [Create(f"{zk_prefix}/k")])
    listing = parts.calls.submit_children(zk_prefix, "list")
    assert await parts.calls.wait(listing, "list") == ["k"]
    assert await parts.calls.wait(reply, "create") is None


@zk
async def test_a_lost_connection_fails_every_member(parts: Parts, zk_prefix: str) -> None:
    replies = [
        parts.calls.submit_transaction("create", [Create(f"{zk_prefix}/m{i}")]) for i in range(3)
    ]
    # Stopped in the same turn, before the group is sent: the whole request fails.
    parts.session.client.stop()
    for reply in replies:
        with pytest.raises(MetadataUnavailable):
            await parts.calls.wait(reply, "create")


# ---------------------------------------------------------------------------- the window
# At most WINDOW groups unanswered; what is submitted meanwhile waits for an answer and goes
# as one group. Against a session that answers when told to (the requests themselves are
# tested against ZooKeeper above).


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
