"""Counts after a settle: waiting until the broker's cursor has this replica's last acks."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from gateway.backend.pulsar.acks_applied import ACK_WAIT, acks_applied
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.admin_stats import CursorState
from gateway.pulsar.consumer import TrioConsumer
from gateway.pulsar.ids import MessageId

TOPIC = "persistent://t/n/amq.default__q"


class Message:
    def __init__(self, entry: int, *, in_batch: bool = False) -> None:
        self.topic = TOPIC
        self.message_id = MessageId(7, entry, -1, -1)
        self.in_batch = in_batch


class Consumer:
    subscription = "q"

    def __init__(self, acked: Message | None) -> None:
        self.last_acknowledged: Any = acked


class Admin:
    """The cursor has acknowledged up to ``mark``; ``reads`` counts the looks."""

    def __init__(self, mark: int) -> None:
        self.mark = mark
        self.reads = 0

    async def cursor_state(self, topic: str, subscription: str) -> CursorState:
        self.reads += 1
        return CursorState((7, self.mark), ())


def waiting(admin: Admin, *consumers: Consumer) -> Any:
    return acks_applied(cast(PulsarAdmin, admin), cast(list[TrioConsumer], list(consumers)))


async def test_waits_until_the_cursor_has_the_last_ack(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin = Admin(mark=3)
    consumer = Consumer(Message(5))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting, admin, consumer)
        await trio.sleep(0.5)
        assert consumer.last_acknowledged is not None  # still waiting
        admin.mark = 5  # the ack group reached the broker
    assert consumer.last_acknowledged is None
    reads = admin.reads
    await waiting(admin, consumer)
    assert admin.reads == reads  # nothing acknowledged since: no look


async def test_an_ack_that_never_arrives_costs_one_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin = Admin(mark=3)
    consumer = Consumer(Message(5))  # its consumer reconnected: the broker never had it
    started = trio.current_time()
    await waiting(admin, consumer)
    assert trio.current_time() - started == ACK_WAIT
    started = trio.current_time()
    await waiting(admin, consumer)
    assert trio.current_time() == started


async def test_an_ack_made_while_waiting_is_waited_for_by_the_next_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin = Admin(mark=3)
    consumer = Consumer(Message(5))
    later = Message(9)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiting, admin, consumer)
        await trio.sleep(0.1)
        consumer.last_acknowledged = later
        admin.mark = 5
    assert consumer.last_acknowledged is later


async def test_a_batched_message_is_not_waited_for(autojump_clock: trio.testing.MockClock) -> None:
    admin = Admin(mark=3)
    consumer = Consumer(Message(5, in_batch=True))
    await waiting(admin, consumer)
    assert admin.reads == 0 and consumer.last_acknowledged is None
