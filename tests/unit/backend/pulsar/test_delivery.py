"""PulsarDelivery's two-step settlements (a copy stored, then the original acknowledged) with
the store failing, PulsarQueueSubscription's moves of batch messages (the rests of split
batches at the close, read-ahead moved on for other consumers) likewise, and the close waiting
for them: a fake Pulsar consumer records what reaches it, in order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio

from gateway.backend.interface import Message
from gateway.backend.pulsar.delivery import PulsarDelivery, PulsarQueueSubscription
from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.pulsar.consumer import TrioConsumer
from gateway.pulsar.ids import BatchPosition

TOPIC = "persistent://public/default/amq.default__q"
ALONE = BatchPosition((1, 1, -1), -1, 0)  # a message that is an entry of its own


@dataclass
class FakeOptions:
    batch_index_ack: bool = True  # no split-batch completion at the close
    priority_of: None = None


@dataclass(eq=False)
class FakeReceived:
    id_bytes: bytes
    in_batch: bool = True
    chunked: bool = False
    topic: str = TOPIC
    payload: bytes = b"body"
    properties: dict[str, str] = field(default_factory=dict)
    publish_timestamp: int = 1
    redelivery_count: int = 0
    batch_position: BatchPosition = ALONE


def in_entry(name: str, index: int, size: int = 3) -> Any:
    """Message ``index`` of a batch of ``size`` in entry 1:1."""
    return FakeReceived(name.encode(), batch_position=BatchPosition((1, 1, -1), index, size))


@dataclass
class FakeConsumer:
    """What the subscription calls on its Pulsar consumer, in order."""

    events: list[str] = field(default_factory=list)
    options: FakeOptions = field(default_factory=FakeOptions)
    topics: tuple[str, ...] = (TOPIC,)
    # What it read ahead and never handed over: taken at the close, or moved on.
    read_ahead: list[Any] = field(default_factory=list)
    # Per topic, the message furthest along it that receive() returned.
    last_taken: dict[str, Any] = field(default_factory=dict)

    async def collect_entry_tails(self, _wait: float) -> None:
        pass

    def take_unreceived(self) -> list[Any]:
        taken, self.read_ahead = self.read_ahead, []
        return taken

    async def take_batched_read_ahead(self, _wait: float) -> list[Any]:
        return self.take_unreceived()

    def acknowledge(self, received: FakeReceived) -> None:
        self.events.append(f"ack {received.id_bytes.decode()}")

    def negative_acknowledge(self, received: FakeReceived) -> None:
        self.events.append(f"nack {received.id_bytes.decode()}")

    async def aclose(self) -> None:
        self.events.append("close")


async def refused(*_args: object) -> None:
    raise RuntimeError("Pulsar refused the write")


def subscription_of(
    consumer: FakeConsumer,
    *,
    requeue_copies: Callable[..., Awaitable[None]] = refused,
    dead_letter: Callable[..., Awaitable[None]] = refused,
) -> PulsarQueueSubscription:
    return PulsarQueueSubscription(
        "q",
        cast(TrioConsumer, consumer),
        lambda _message, _received: True,
        lambda _subscription: None,
        Redeliveries(),
        requeue_copies,
        dead_letter,
    )


def delivery_of(subscription: PulsarQueueSubscription, name: str) -> PulsarDelivery:
    received: Any = FakeReceived(name.encode())
    return PulsarDelivery(subscription, received, Message("", "q", b"", b"body"))


async def test_a_requeue_whose_copy_is_not_stored_gives_the_original_back() -> None:
    consumer = FakeConsumer()
    delivery = delivery_of(subscription_of(consumer), "m1")
    await delivery.reject(requeue=True)
    assert consumer.events == ["nack m1"]  # never acknowledged: the original stays


async def test_a_drop_whose_dead_letter_is_not_stored_gives_the_original_back() -> None:
    consumer = FakeConsumer()
    delivery = delivery_of(subscription_of(consumer), "m1")
    await delivery.drop("rejected")
    assert consumer.events == ["nack m1"]


@pytest.mark.parametrize("later", [0, 1], ids=["one", "another-after-the-close-began"])
async def test_the_close_waits_for_copies_under_way(later: int) -> None:
    """Closing between a copy and its original's acknowledgement would drop the
    acknowledgement, and Pulsar would give the original back beside its copy. A requeue
    that begins while the close waits is waited for too, and the close goes on once the last
    of them ends."""
    consumer = FakeConsumer()
    stored = trio.Event()

    async def slow_copy(*_args: object) -> None:
        await stored.wait()

    subscription = subscription_of(consumer, requeue_copies=slow_copy)
    deliveries = [delivery_of(subscription, f"m{n}") for n in range(1 + later)]
    with trio.fail_after(4):  # under TWO_STEP_WAIT: the close must not merely time out
        async with trio.open_nursery() as nursery:
            nursery.start_soon(deliveries[0].reject, True)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(subscription.close)
            await trio.testing.wait_all_tasks_blocked()
            for delivery in deliveries[1:]:
                nursery.start_soon(delivery.reject, True)
            await trio.testing.wait_all_tasks_blocked()
            assert consumer.events == []  # the close waits
            stored.set()
    *acks, last = consumer.events
    assert sorted(acks) == [f"ack m{n}" for n in range(1 + later)] and last == "close"


def copies_recorded_in(consumer: FakeConsumer) -> Callable[..., Awaitable[None]]:
    async def store(_queue: str, copies: list[Any]) -> None:
        consumer.events.append(f"copies {len(copies)}")

    return store


async def test_moved_messages_are_acknowledged_only_after_their_copies_are_stored() -> None:
    consumer = FakeConsumer()
    subscription = subscription_of(consumer, requeue_copies=copies_recorded_in(consumer))
    await subscription.move_to_queue_topic([in_entry("m1", 1), in_entry("m2", 2)])
    assert consumer.events == ["copies 2", "ack m1", "ack m2"]


async def test_a_move_whose_copies_are_not_stored_acknowledges_nothing() -> None:
    """The batch comes back whole from Pulsar (duplicates, never a loss)."""
    consumer = FakeConsumer()
    await subscription_of(consumer).move_to_queue_topic([in_entry("m1", 1), in_entry("m2", 2)])
    assert consumer.events == []


async def test_read_ahead_moved_on_for_other_consumers_is_kept_when_its_copy_fails() -> None:
    consumer = FakeConsumer(read_ahead=[in_entry("m1", 0), in_entry("m2", 1)])
    assert await subscription_of(consumer).move_on_batches() == 2
    assert consumer.events == []


@pytest.mark.parametrize("stored", [True, False], ids=["stored", "refused"])
async def test_the_rests_of_split_batches_are_moved_at_the_close(stored: bool) -> None:
    """Message 0 of the entry was delivered, 1 and 2 were read ahead: on a broker without
    batch-index acknowledgements they are moved (copied, then acknowledged) before the
    consumer closes; with the copy refused nothing is acknowledged and the close goes on."""
    consumer = FakeConsumer(options=FakeOptions(batch_index_ack=False))
    consumer.read_ahead = [in_entry("m1", 1), in_entry("m2", 2)]
    store = copies_recorded_in(consumer) if stored else refused
    await subscription_of(consumer, requeue_copies=store).close()
    moved = ["copies 2", "ack m1", "ack m2"] if stored else []
    assert consumer.events == [*moved, "close"]


@pytest.mark.parametrize("how", ["move", "move_on"])
async def test_a_move_is_not_split_by_its_task_s_cancellation(how: str) -> None:
    """Cancelled between the copies' write and the originals' acknowledgement (the channel's
    connection lost while a cancelled consumer moved its read-ahead), the batch came back
    whole beside the copies: the Java client's settle-on-close scenario, 2 runs in 4."""
    consumer = FakeConsumer(read_ahead=[in_entry("m1", 1), in_entry("m2", 2)])
    stored = trio.Event()

    async def slow_copies(_queue: str, copies: list[Any]) -> None:
        await stored.wait()
        consumer.events.append(f"copies {len(copies)}")

    subscription = subscription_of(consumer, requeue_copies=slow_copies)
    with trio.fail_after(4):
        async with trio.open_nursery() as nursery:
            with trio.CancelScope() as scope:
                if how == "move":
                    moved = consumer.take_unreceived()
                    nursery.start_soon(subscription.move_to_queue_topic, moved)
                else:
                    nursery.start_soon(subscription.move_on_batches)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
            nursery.cancel_scope.cancel()  # the move's own task too
            stored.set()
    if how == "move":
        assert consumer.events == ["copies 2", "ack m1", "ack m2"]
    else:
        assert consumer.events == ["copies 1", "ack m1", "copies 1", "ack m2"]
