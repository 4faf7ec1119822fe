"""kazoo requests issued from trio, answered in server order, and the transaction operations.

ZooKeeper answers one session's requests in order, and kazoo's completion thread runs the
callbacks in that order, so answers reach trio (``KazooSession.link``) in server order. Every
answer is *applied* (to the mirror, the view) right there, in the ``apply`` callback, never
later in the task that awaits it: a task resumes after other callbacks have run, and applying
its answer then could put an older state over a newer one. So own writes are in the view when
the write returns, and a later watch event cannot regress them. (kazoo APIs that wrap their
result in a second AsyncResult, ``create_async`` and ``sync_async``, would reorder callbacks;
writes therefore go through ``transaction()`` even for a single create.)
"""

from __future__ import annotations

import enum
import random
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Generic, TypeVar

import outcome
import trio
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
    ZookeeperStoppedError,
)

from gateway.metadata.codec import namespace_document
from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.mixed_read import MISSING, Read
from gateway.metadata.paths import BUCKETS, Layout
from gateway.metadata.values import MetadataUnavailable
from gateway.metadata.zookeeper.group_commit import GroupCommit, failed_index
from gateway.metadata.zookeeper.ops import Create, Delete, Op, SetData

T = TypeVar("T")

# A compare-and-set loop gives up after this many lost races (each one means someone else
# changed the same entity meanwhile; a handful is already unusual).
ATTEMPTS: Final = 16
# After the second lost race in a row, wait a random time up to this, doubled per race and
# capped at RACE_BACKOFF_CAP, before trying again: contenders that keep colliding (a delete
# racing twenty binds of the same queue) spread out instead of losing every round.
RACE_BACKOFF: Final = 0.002
RACE_BACKOFF_CAP: Final = 0.2
# The timeout sweeper drops answered replies at least this often (seconds).
SWEEP: Final = 1.0
# Errors that say "the connection went away": the outcome of a write is then unknown.
CONNECTION_ERRORS: Final = (
    ConnectionLoss,
    SessionExpiredError,
    ConnectionClosedError,
    ZookeeperStoppedError,
    OperationTimeoutError,
)
# Why the metadata store refuses a write while ZooKeeper is away (appended to the refusal).
_REFUSAL: Final = (
    "; metadata changes are refused until it is back, while publishing and consuming go on "
    "with the entities already known"
)


# A failed transaction: the index of the operation that failed, and its error.
Failure = tuple[int, Exception]


def absent(path: str) -> list[Op]:
    """Operations that fail the transaction (NodeExists at the first) if ``path`` exists, and
    change nothing otherwise: ZooKeeper has no "check absent", but creating and deleting a node
    within one transaction is exactly that."""
    return [Create(path), Delete(path)]


def nothing() -> None:
    """An ``on_success`` for writes whose success changes no view."""


class Reply(Generic[T]):
    """One answer, applied on the trio thread and awaited by one task.

    Lighter than a trio Event and a cancel scope per request (two to five requests per AMQP
    command): the waiting task is parked and rescheduled directly, and the timeout is the
    calls' one sweeper's (``KazooCalls._sweep``), not a deadline per request."""

    __slots__ = ("_task", "deadline", "result")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.result: outcome.Outcome[T] | None = None
        self._task: trio.lowlevel.Task | None = None

    def set(self, result: outcome.Outcome[T]) -> None:
        """The answer (or the timeout): the first one counts; the waiting task wakes up."""
        if self.result is not None:
            return
        self.result = result
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def wait(self) -> outcome.Outcome[T]:
        """The answer, once set (a checkpoint either way)."""
        if self.result is None:
            self._task = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._task = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        else:
            await trio.lowlevel.checkpoint()
        assert self.result is not None
        return self.result


def _children(answer: Any) -> list[str]:
    return [] if answer is MISSING else list(answer)


def _data(answer: Any) -> tuple[bytes, int] | None:
    return None if answer is MISSING else (answer[0], answer[1])


def unexpected(error: Exception, what: str) -> Exception:
    """What to raise for an error no caller expected: ZooKeeper's as MetadataUnavailable."""
    if isinstance(error, KazooException):
        return MetadataUnavailable(f"ZooKeeper refused to {what}: {type(error).__name__}")
    return error


def too_many_races(what: str) -> MetadataUnavailable:
    return MetadataUnavailable(
        f"could not {what}: it changed concurrently {ATTEMPTS} times in a row; try again"
    )


class Again(enum.Enum):
    """What an attempt of a compare-and-set loop returns when it lost a race (or repaired
    something in the way): the loop tries again, from a fresh read."""

    AGAIN = enum.auto()


AGAIN: Final = Again.AGAIN


async def retry_races(what: str, attempt: Callable[[], Awaitable[T | Again]]) -> T:
    """``attempt()``'s first answer other than AGAIN; MetadataUnavailable after ATTEMPTS
    lost races in a row. The first retry is immediate (a missing bucket, created meanwhile, is
    the usual cause); later ones back off."""
    for lost in range(ATTEMPTS):
        if lost >= 2:
            await trio.sleep(random.uniform(0, min(RACE_BACKOFF_CAP, RACE_BACKOFF * 2**lost)))
        result = await attempt()
        if not isinstance(result, Again):
            return result
    raise too_many_races(what)


def value(result: Any, what: str) -> Any:
    """The value of a kazoo answer; a lost connection as MetadataUnavailable."""
    try:
        return result.get_nowait()
    except CONNECTION_ERRORS as error:
        raise MetadataUnavailable(
            f"lost the connection to ZooKeeper while trying to {what}; the change may or "
            "may not have been made"
        ) from error


class KazooCalls:
    """Requests on one session, each answer applied on arrival (see the module docstring)."""

    def __init__(self, session: KazooSession, layout: Layout) -> None:
        self.session = session
        self.layout = layout
        self.group = GroupCommit(session)
        # Replies not yet timed out or dropped, oldest first; whether the sweeper runs.
        self._pending: deque[tuple[Reply[Any], str]] = deque()
        self._sweeping = False

    @property
    def client(self) -> Any:
        return self.session.client

    def check_writable(self, what: str) -> None:
        self.session.check_connected(what, _REFUSAL)

    async def prepare(self, what: str) -> None:
        """Connect if not yet; refuse at once while ZooKeeper is unreachable."""
        await self.session.connect()
        self.check_writable(what)

    # ------------------------------------------------------------------ issuing, waiting

    def _reply(
        self, apply: Callable[[Any], T], what: str
    ) -> tuple[Reply[T], Callable[[Any], None]]:
        """A reply and the callback that fills it: ``apply`` the answer there (in answer
        order), and wake the task awaiting it. The sweeper times it out."""
        reply: Reply[T] = Reply(trio.current_time() + self.session.request_timeout)

        def on_answer(result: Any) -> None:
            reply.set(outcome.capture(apply, result))

        self._pending.append((reply, what))
        if not self._sweeping:
            self._sweeping = True
            trio.lowlevel.spawn_system_task(self._sweep, name="metadata request timeouts")
        return reply, on_answer

    async def _sweep(self) -> None:
        """Time out the replies not answered within ``request_timeout``. They are in the
        order of their deadlines; answered ones are dropped at least every second."""
        pending = self._pending
        try:
            while pending:
                reply, what = pending[0]
                if reply.result is not None:
                    pending.popleft()
                elif trio.current_time() >= reply.deadline:
                    pending.popleft()
                    reply.set(outcome.Error(self._timed_out(what)))
                else:
                    await trio.sleep_until(min(reply.deadline, trio.current_time() + SWEEP))
        finally:
            self._sweeping = False

    def _timed_out(self, what: str) -> MetadataUnavailable:
        return MetadataUnavailable(
            f"ZooKeeper did not answer within {self.session.request_timeout:g} s while trying "
            f"to {what}; the change may or may not have been made"
        )

    def submit(self, what: str, issue: Callable[[], Any], apply: Callable[[Any], T]) -> Reply[T]:
        """Issue a kazoo call; its answer is applied in order on the trio thread. Refused at
        once while ZooKeeper is unreachable (kazoo would queue it). Grouped transactions and
        reads waiting for the end of the turn go first (group_commit.py, "Order")."""
        self.check_writable(what)
        self.group.flush()
        reply, on_answer = self._reply(apply, what)
        self.session.link(issue(), on_answer)
        return reply

    async def wait(self, reply: Reply[T], what: str) -> T:
        """The answer, or MetadataUnavailable if none comes within ``request_timeout``."""
        result = await reply.wait()
        return result.unwrap()

    async def ask(self, issue: Callable[[], Any], apply: Callable[[Any], T], what: str) -> T:
        return await self.wait(self.submit(what, issue, apply), what)

    # ------------------------------------------------------------------ transactions

    async def transact(
        self,
        what: str,
        ops: Sequence[Op],
        on_success: Callable[[], None],
        on_failure: Callable[[int, Exception], None] | None = None,
    ) -> Failure | None:
        """Commit ``ops`` atomically. On success ``on_success`` runs in answer order (it
        updates the view) and None is returned; otherwise ``on_failure`` runs likewise and
        (index of the failed op, its error) is returned."""
        return await self.wait(self.submit_transaction(what, ops, on_success, on_failure), what)

    def submit_transaction(
        self,
        what: str,
        ops: Sequence[Op],
        on_success: Callable[[], None] | None = None,
        on_failure: Callable[[int, Exception], None] | None = None,
    ) -> Reply[Failure | None]:
        self.check_writable(what)
        # Watch events for what it creates or changes are held until it is answered.
        own = self.session.own_writes
        written = [op.path for op in ops if isinstance(op, Create | SetData)]

        def apply(result: Any) -> Failure | None:
            failed = True
            try:
                results = value(result, what)
                index = failed_index(results)
                if index is not None:
                    if on_failure is not None:
                        on_failure(index, results[index])
                    return index, results[index]
                failed = False
                if on_success is not None:
                    on_success()
                return None
            finally:
                own.end(written, failed=failed)

        reply, on_answer = self._reply(apply, what)
        # With the other transactions of this turn, in one multi (group_commit.py).
        self.group.write(ops, on_answer)
        own.begin(written)
        return reply

    # ------------------------------------------------------------------ small requests

    def submit_read(self, kind: Read, path: str, what: str, apply: Callable[[Any], T]) -> Reply[T]:
        """Read ``path`` with the other reads of this turn, in one multiRead
        (group_commit.py); ``apply`` gets the answer: ``(data, version)`` or the children, or
        ``MISSING``."""
        self.check_writable(what)

        def answered(result: Any) -> T:
            return apply(value(result, what))

        reply, on_answer = self._reply(answered, what)
        self.group.read(kind, path, on_answer)
        return reply

    def submit_children(self, path: str, what: str) -> Reply[list[str]]:
        """List ``path`` (no watch); a missing node has no children."""
        return self.submit_read(Read.CHILDREN, path, what, _children)

    async def children(self, path: str, what: str) -> list[str]:
        return await self.wait(self.submit_children(path, what), what)

    async def synced_children(self, path: str, what: str) -> list[str]:
        """The children of ``path`` after a sync (none if it does not exist): what another
        replica wrote before now, whether or not this one's watches have reported it."""
        await self.prepare(what)
        self.group.flush()
        self.client.sync_async(path)  # the listing below is answered after it (same session)
        return await self.children(path, what)

    def submit_data(self, path: str, what: str) -> Reply[tuple[bytes, int] | None]:
        """The node's data and version (None if it does not exist), read with the other
        reads of this turn."""
        return self.submit_read(Read.DATA, path, what, _data)

    async def read_data(self, path: str, what: str) -> tuple[bytes, int] | None:
        """The node's data and version; None if it does not exist."""
        return await self.wait(self.submit_data(path, what), what)

    async def exists(self, path: str, what: str) -> bool:
        """Whether ``path`` exists."""
        return await self.read_data(path, what) is not None

    async def delete_if_there(self, path: str, what: str) -> None:
        failure = await self.transact(what, [Delete(path)], nothing)
        if failure is not None and not isinstance(failure[1], NoNodeError):
            raise unexpected(failure[1], what)

    # ------------------------------------------------------------------ folders, buckets

    async def ensure_parents(self, namespace: str, path: str, what: str) -> None:
        """Create the bucket of ``path`` (and the namespace's folders, if missing too).

        Buckets are created on first use: an empty vhost does not cost 1,024 znodes, nor a
        replica 1,024 listings to open it. Usually only the bucket is missing."""
        bucket = path.rsplit("/", 1)[0]
        failure = await self.transact(what, [Create(bucket)], nothing)
        if failure is None or isinstance(failure[1], NodeExistsError):
            return
        if not isinstance(failure[1], NoNodeError):
            raise unexpected(failure[1], what)
        await self.ensure_paths(namespace, [*self.layout.skeleton(namespace), bucket], what)

    async def ensure_paths(self, namespace: str, paths: Sequence[str], what: str) -> None:
        """Create each path unless it exists. All are issued before any answer is awaited, in
        the order given: one session's requests are applied in order, so a parent listed
        before its child exists when the child is created."""
        root = self.layout.namespace(namespace)
        replies = [
            self.submit_transaction(
                what, [Create(path, namespace_document(BUCKETS) if path == root else b"")]
            )
            for path in paths
        ]
        for reply in replies:
            failure = await self.wait(reply, what)
            if failure is not None and not isinstance(failure[1], NodeExistsError):
                raise unexpected(failure[1], what)
