"""Publisher confirms: in publish order, coalesced with multiple=True, nack on failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from gateway.server.confirms import ConfirmQueue, SendConfirm


class Pending:
    """A Stored whose outcome the test decides."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._error: Exception | None = None

    def done(self) -> bool:
        return self._event.is_set()

    async def durable(self) -> None:
        await self._event.wait()
        if self._error is not None:
            raise self._error

    def succeed(self) -> None:
        self._event.set()

    def fail(self) -> None:
        self._error = RuntimeError("write failed")
        self._event.set()


class Reported(Pending):
    """A Stored that reports its outcome to done-callbacks, as a Pulsar send handle does."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[Any], None]] = []

    @property
    def error(self) -> Exception | None:
        return self._error

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self._callbacks.append(callback)

    def succeed(self) -> None:
        super().succeed()
        self._report()

    def fail(self) -> None:
        super().fail()
        self._report()

    def _report(self) -> None:
        for callback in self._callbacks:
            callback(self)


class Output:
    """The connection: what was written at once, and what the task had to flush."""

    def __init__(self, sent: list[tuple[int, bool, bool]], *, can_write_now: bool = True):
        self._sent = sent
        self.can_write_now = can_write_now
        self.written_now: list[tuple[int, bool, bool]] = []
        self.flushed: list[tuple[int, bool, bool]] = []
        self._taken = 0

    def _take(self) -> list[tuple[int, bool, bool]]:
        taken, self._taken = self._sent[self._taken :], len(self._sent)
        return taken

    def flush_now(self) -> bool:
        if not self.can_write_now:
            return False
        self.written_now += self._take()
        return True

    async def flush(self) -> None:
        self.flushed += self._take()
        await trio.lowlevel.checkpoint()


def recorder(sent: list[tuple[int, bool, bool]]) -> SendConfirm:
    def send(tag: int, multiple: bool, ok: bool) -> None:
        sent.append((tag, multiple, ok))

    return send


def confirm_queue(sent: list[tuple[int, bool, bool]]) -> ConfirmQueue:
    return ConfirmQueue(recorder(sent), Output(sent))


async def test_acks_wait_for_earlier_messages_and_coalesce() -> None:
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    stored = [Pending() for _ in range(4)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        for item in stored:
            queue.add(item)
        # Later messages are stored first: nothing may be confirmed before message 1.
        stored[3].succeed()
        stored[1].succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []
        stored[2].succeed()
        stored[0].succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [(4, True, True)]
        nursery.cancel_scope.cancel()


async def test_a_failed_write_is_nacked_alone() -> None:
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    stored = [Pending() for _ in range(4)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        for item in stored:
            queue.add(item)
        stored[0].succeed()
        stored[1].succeed()
        stored[2].fail()
        stored[3].succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [(2, True, True), (3, False, False), (4, False, True)]
        nursery.cancel_scope.cancel()


async def test_one_by_one_confirms_are_single() -> None:
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        for expected in (1, 2, 3):
            item = Pending()
            assert queue.add(item) == expected
            item.succeed()
            await trio.testing.wait_all_tasks_blocked()
            assert sent[-1] == (expected, False, True)
        nursery.cancel_scope.cancel()


class Counted(Pending):
    """A Pending that counts how often it is awaited."""

    def __init__(self) -> None:
        super().__init__()
        self.awaited = 0

    async def durable(self) -> None:
        self.awaited += 1
        await super().durable()


async def test_messages_of_one_grouped_send_are_confirmed_together() -> None:
    # A grouped send (gateway/pulsar/producer.py) gives its messages one shared Stored.
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    group, alone = Counted(), Pending()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        for item in (group, group, group, alone):
            queue.add(item)
        alone.succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []  # the group is not stored yet: nothing after it either
        group.succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [(4, True, True)]
        assert group.awaited == 1  # the later messages of the group were not awaited again
        nursery.cancel_scope.cancel()


async def test_a_failed_grouped_send_nacks_each_of_its_messages() -> None:
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    before, group, after = Pending(), Pending(), Pending()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        for item in (before, group, group, after):
            queue.add(item)
        before.succeed()
        group.fail()
        after.succeed()
        await trio.testing.wait_all_tasks_blocked()
        oks = {tag: ok for tag, _, ok in sent}
        assert oks[1] and not oks[2] and not oks[3] and oks[4]
        assert max(tag for tag, _, _ in sent) == 4
        nursery.cancel_scope.cancel()


async def test_a_send_handle_is_confirmed_from_its_callback_and_written_at_once() -> None:
    # A publisher waiting for each confirm gets it as the receipt is drained, without a pass
    # of trio's run loop for the queue's task.
    sent: list[tuple[int, bool, bool]] = []
    output = Output(sent)
    queue = ConfirmQueue(recorder(sent), output)
    first, second = Reported(), Reported()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        queue.add(first)
        queue.add(second)
        await trio.testing.wait_all_tasks_blocked()
        second.succeed()
        assert sent == []  # the first is not stored yet
        first.succeed()
        assert output.written_now == [(2, True, True)]  # no checkpoint in between
        third = Reported()
        queue.add(third)
        await trio.testing.wait_all_tasks_blocked()
        third.fail()
        assert output.written_now == [(2, True, True), (3, False, False)]
        assert output.flushed == []
        nursery.cancel_scope.cancel()


async def test_confirms_the_output_cannot_take_at_once_are_flushed_by_the_task() -> None:
    sent: list[tuple[int, bool, bool]] = []
    output = Output(sent, can_write_now=False)
    queue = ConfirmQueue(recorder(sent), output)
    item = Reported()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        queue.add(item)
        await trio.testing.wait_all_tasks_blocked()
        item.succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert output.flushed == [(1, False, True)]
        nursery.cancel_scope.cancel()


async def test_a_pending_write_to_several_queues_is_awaited_between_send_handles() -> None:
    # Only a send handle calls back; any other Stored is awaited by the task, in its turn.
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    before, several, after = Reported(), Pending(), Reported()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        for item in (before, several, after):
            queue.add(item)
        await trio.testing.wait_all_tasks_blocked()
        after.succeed()
        before.succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [(1, False, True)]
        several.succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == [(1, False, True), (3, True, True)]
        nursery.cancel_scope.cancel()


async def test_nothing_is_confirmed_after_close() -> None:
    # The channel is closing: a receipt drained after that confirms nothing.
    sent: list[tuple[int, bool, bool]] = []
    queue = confirm_queue(sent)
    item = Reported()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(queue.run)
        queue.add(item)
        await trio.testing.wait_all_tasks_blocked()
        queue.close()
        item.succeed()
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []
    # close() ended the task: the nursery closed without being cancelled.
