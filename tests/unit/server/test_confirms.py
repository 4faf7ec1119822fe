"""Publisher confirms: in publish order, coalesced with multiple=True, nack on failure."""

from __future__ import annotations

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


def recorder(sent: list[tuple[int, bool, bool]]) -> SendConfirm:
    async def send(tag: int, multiple: bool, ok: bool) -> None:
        sent.append((tag, multiple, ok))

    return send


async def test_acks_wait_for_earlier_messages_and_coalesce() -> None:
    sent: list[tuple[int, bool, bool]] = []
    queue = ConfirmQueue(recorder(sent))
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
    queue = ConfirmQueue(recorder(sent))
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
    queue = ConfirmQueue(recorder(sent))
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
    queue = ConfirmQueue(recorder(sent))
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
    queue = ConfirmQueue(recorder(sent))
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
