"""Group commit: the transactions that tasks submit together go to ZooKeeper in one multi, and
their reads in one multiRead.

Under load many tasks write at once (48 connections declaring and binding): each write used to
be a request of its own, with its own packet, answer, wake-up of kazoo's connection thread and
hand-off to trio. Here a transaction submitted through :meth:`GroupCommit.write` waits for the
end of the current scheduling turn of trio (``run_sync_soon``: every task runnable now has run
first), and then every transaction submitted meanwhile is sent as **one multi-op**; likewise
every read submitted through :meth:`GroupCommit.read` (a node's data and version, or its
children: mixed_read.py), as **one multiRead**. One task alone
pays a scheduling turn (microseconds); many pay one request between them.

**Each member keeps its own answer.** A multi is atomic: if one operation fails, none is
applied, and the failure of one member would fail the others. A failed group is therefore sent
again: the members before the failed one as one group (they succeeded together, so they will
again unless something changed meanwhile, in which case the same rule applies), and every
member from the failed one on **alone**, each getting the answer ZooKeeper gives its own
transaction. The failed member's first error is not passed on as its answer: it may have come
from a member before it in the same group (two declares of one name: the second fails on the
first's create, which the failure rolled back). A group is sent again from the answer callback,
so a member's answer is still applied in the order ZooKeeper answered its own request.

**Order.** ZooKeeper applies one session's requests in the order they were sent. Members go in
the order they were submitted, transactions before reads, so a task that submits a write and
then a read without awaiting the write still has the read served after the write (the
binder's handshake, docs/fleet.md, "Lazy subscriptions": a read after the session's own write
sees everything ordered before that write). A read submitted *before* a write by the same task,
unawaited, could be sent after it: no caller does that. Any other request that goes through
``KazooCalls.submit`` flushes the groups first (:meth:`GroupCommit.flush`), so that requests
of one task keep their order whatever API they use.

**A window of requests in flight.** At most ``WINDOW`` groups (multis and multiReads) are
unanswered at a time; what is submitted while the window is full waits for the next answer
and goes with everything else submitted meanwhile. Alone, a task never waits for it (nothing
is in flight); under load the groups grow with the load instead of with the number of
connections that happen to submit in the same turn: measured through one replica, 48
connections declaring and binding (docs/fleet.md, "Group commit with a window"). A request of
another kind (``flush``) sends everything waiting at once, window or not, to keep the order.

A group holds at most ``TXN_OPS`` operations and ``TXN_BYTES`` bytes (ZooKeeper refuses
packets over ``jute.maxbuffer``), a multiRead at most ``READS`` paths; more start another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from kazoo.exceptions import RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import CheckVersion as KazooCheck
from kazoo.protocol.serialization import Create as KazooCreate
from kazoo.protocol.serialization import Delete as KazooDelete
from kazoo.protocol.serialization import SetData as KazooSetData
from kazoo.protocol.serialization import Transaction
from kazoo.security import OPEN_ACL_UNSAFE

from gateway.metadata.kazoo_internals import submit_call
from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.mixed_read import MixedRead, Read
from gateway.metadata.zookeeper.ops import TXN_BYTES, TXN_OPS, Check, Create, Delete, Op, op_size

__all__ = ["READS", "Answer", "GroupCommit", "failed_index"]

# Paths per multiRead (as the load's: an answer of a few hundred KB at most).
READS: Final = 500
# Groups unanswered at a time (see the module docstring).
WINDOW: Final = 1
_EPHEMERAL: Final = 1


class Answer:
    """One member's part of a grouped answer, read like a kazoo result (``get_nowait``): its
    operations' results, or the error of the whole request (a lost connection)."""

    __slots__ = ("_error", "_value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self._value = value
        self._error = error

    def get_nowait(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


Deliver = Callable[[Answer], None]


class _Write:
    __slots__ = ("deliver", "ops", "size")

    def __init__(self, ops: Sequence[Op], deliver: Deliver) -> None:
        self.ops = ops
        self.deliver = deliver
        self.size = sum(op_size(op) for op in ops)


def failed_index(results: Sequence[Any]) -> int | None:
    """The index of the operation that failed a multi (the others report "rolled back" or
    "runtime inconsistency"); None if it succeeded."""
    for index, item in enumerate(results):
        if isinstance(item, Exception) and not isinstance(
            item, RolledBackError | RuntimeInconsistency
        ):
            return index
    return None


class GroupCommit:
    """Transactions and reads of one session, sent in groups (see the module docstring)."""

    def __init__(self, session: KazooSession) -> None:
        self._session = session
        self._writes: list[_Write] = []
        self._reads: list[tuple[Read, str, Deliver]] = []
        self._scheduled = False
        self._in_flight = 0  # groups sent and not answered yet
        # What was sent: requests, and the members in them (for the benchmark's figures).
        self.requests = 0
        self.members = 0

    # ------------------------------------------------------------------ submitting

    def write(self, ops: Sequence[Op], deliver: Deliver) -> None:
        """Send ``ops`` as one transaction with the others of this turn; ``deliver`` gets
        its results (one per operation) on the trio thread, in answer order."""
        self._writes.append(_Write(ops, deliver))
        self._schedule()

    def read(self, kind: Read, path: str, deliver: Deliver) -> None:
        """Read ``path`` with the others of this turn; ``deliver`` gets ``(data, version)``
        (``Read.DATA``) or its children (``Read.CHILDREN``), or ``MISSING`` (mixed_read.py)."""
        self._reads.append((kind, path, deliver))
        self._schedule()

    @property
    def in_flight(self) -> int:
        """Groups sent and not answered yet."""
        return self._in_flight

    @property
    def waiting(self) -> int:
        """Transactions and reads submitted and not sent yet."""
        return len(self._writes) + len(self._reads)

    def _schedule(self) -> None:
        # With the window full, the next answer schedules the flush (_sent_answered).
        if not self._scheduled and self._in_flight < WINDOW:
            self._scheduled = True
            self._session.notify(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._scheduled = False
        if self._in_flight < WINDOW:  # a flush() since may have filled it
            self.flush()

    def _sent(self) -> None:
        self._in_flight += 1
        self.requests += 1

    def _sent_answered(self) -> None:
        self._in_flight -= 1
        if self._writes or self._reads:
            self._schedule()

    def flush(self) -> None:
        """Send what is waiting now: the transactions (as few multis as fit), then the reads."""
        writes, self._writes = self._writes, []
        reads, self._reads = self._reads, []
        for group in _fitting(writes):
            self._send_writes(group)
        for start in range(0, len(reads), READS):
            self._send_reads(reads[start : start + READS])

    # ------------------------------------------------------------------ transactions

    def _send_writes(self, group: list[_Write]) -> None:
        client = self._session.client
        chroot = client.chroot or ""
        acl = client.default_acl or OPEN_ACL_UNSAFE
        requests: list[Any] = []
        for member in group:
            for op in member.ops:
                path = chroot + op.path
                if isinstance(op, Create):
                    flags = _EPHEMERAL if op.ephemeral else 0
                    requests.append(KazooCreate(path, op.data, acl, flags))
                elif isinstance(op, Delete):
                    requests.append(KazooDelete(path, op.version))
                elif isinstance(op, Check):
                    requests.append(KazooCheck(path, op.version))
                else:
                    requests.append(KazooSetData(path, op.data, op.version))
        result = client.handler.async_result()
        submit_call(client, Transaction(requests), result)
        self._sent()
        self.members += len(group)
        self._session.link(result, lambda answer: self._answered(group, answer))

    def _answered(self, group: list[_Write], answer: Any) -> None:
        # After the members' answers (and any group sent again: it was submitted before
        # what waits), what waits is sent at the end of this turn, with whatever the tasks
        # these answers wake submit.
        try:
            self._deliver(group, answer)
        finally:
            self._sent_answered()

    def _deliver(self, group: list[_Write], answer: Any) -> None:
        try:
            results = answer.get_nowait()
        except Exception as error:  # the whole request: every member's answer
            for member in group:
                member.deliver(Answer(error=error))
            return
        if len(group) == 1:
            group[0].deliver(Answer(results))
            return
        failed = failed_index(results)
        if failed is None:
            start = 0
            for member in group:
                end = start + len(member.ops)
                member.deliver(Answer(results[start:end]))
                start = end
            return
        # Sent again (see the module docstring): those before the failed member together,
        # the failed one and those after it each alone, in the order they were submitted.
        index = _member_of(group, failed)
        if index > 0:
            self._send_writes(group[:index])
        for member in group[index:]:
            self._send_writes([member])

    # ------------------------------------------------------------------ reads

    def _send_reads(self, group: list[tuple[Read, str, Deliver]]) -> None:
        client = self._session.client
        chroot = client.chroot or ""
        result = client.handler.async_result()
        submit_call(client, MixedRead([(kind, chroot + path) for kind, path, _ in group]), result)
        self._sent()
        self.members += len(group)
        self._session.link(result, lambda answer: self._read(group, answer))

    def _read(self, group: list[tuple[Read, str, Deliver]], answer: Any) -> None:
        try:
            self._deliver_reads(group, answer)
        finally:
            self._sent_answered()

    @staticmethod
    def _deliver_reads(group: list[tuple[Read, str, Deliver]], answer: Any) -> None:
        try:
            results = answer.get_nowait()
        except Exception as error:
            for _, _, deliver in group:
                deliver(Answer(error=error))
            return
        for (_, _, deliver), data in zip(group, results, strict=True):
            deliver(Answer(data))


def _member_of(group: list[_Write], op_index: int) -> int:
    """The index of the member of ``group`` whose operations include ``op_index``."""
    end = 0
    for index, member in enumerate(group):
        end += len(member.ops)
        if op_index < end:
            return index
    raise ValueError(f"operation {op_index} is past the group's {end}")


def _fitting(writes: list[_Write]) -> list[list[_Write]]:
    """``writes`` cut, in order, into groups that fit one multi."""
    groups: list[list[_Write]] = []
    current: list[_Write] = []
    ops = size = 0
    for member in writes:
        count = len(member.ops)
        if current and (ops + count > TXN_OPS or size + member.size > TXN_BYTES):
            groups.append(current)
            current, ops, size = [], 0, 0
        current.append(member)
        ops += count
        size += member.size
    if current:
        groups.append(current)
    return groups
