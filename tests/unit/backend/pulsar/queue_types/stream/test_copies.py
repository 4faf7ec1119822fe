"""The stream feed's copier: a named producer per source topic, the original's offset as
sequence id, the ordinary producer (in order) for what has no exact offset, and the log's
deduplication made sure of first."""

from __future__ import annotations

from typing import Any, cast

import trio
import trio.testing

from gateway.backend.interface import Message, Stored
from gateway.backend.pulsar.queue_types.stream.copies import (
    DEDUPLICATION,
    IDLE,
    LogCopier,
    copier_name,
)
from gateway.backend.pulsar.queue_types.stream.offsets import offset_of
from gateway.backend.pulsar.resources import PulsarResources
from gateway.pulsar.ids import MessageId
from gateway.pulsar.producer import ProducerOptions

LOG = "persistent://t/n/amq.default__events"
ORDERS = "persistent://t/n/orders__k"
PAYMENTS = "persistent://t/n/payments__k"


def message_with(body: bytes) -> Message:
    return Message("orders", "k", b"\x00\x00", body)


class Handle:
    """A send that completes when the test says so."""

    def __init__(self) -> None:
        self.event = trio.Event()

    def done(self) -> bool:
        return self.event.is_set()

    async def durable(self) -> None:
        await self.event.wait()


class Producer:
    def __init__(self, topic: str, options: ProducerOptions) -> None:
        self.topic = topic
        self.options = options
        self.sent: list[tuple[bytes, int | None]] = []
        self.handles: list[Handle] = []
        self.closed = False
        self.in_flight = 0
        self.last_used = trio.current_time()

    async def submit(
        self, payload: bytes, properties: Any = None, *, sequence_id: int | None = None
    ) -> Handle:
        self.sent.append((payload, sequence_id))
        self.last_used = trio.current_time()
        self.handles.append(Handle())
        return self.handles[-1]

    async def aclose(self) -> None:
        self.closed = True


class Client:
    def __init__(self) -> None:
        self.producers: list[Producer] = []

    async def create_producer(self, topic: str, options: ProducerOptions) -> Producer:
        self.producers.append(Producer(topic, options))
        return self.producers[-1]


class Stats:
    def __init__(self, status: str) -> None:
        self.raw = {"deduplicationStatus": status}


class Admin:
    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses
        self.policies: list[tuple[str, str, object]] = []

    async def topic_stats(self, topic: str) -> Stats:
        return Stats(self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0])

    async def set_topic_policy(self, topic: str, policy: str, body: object) -> None:
        self.policies.append((topic, policy, body))


class Cache:
    options = ProducerOptions()


class Fallback:
    """The replica's ordinary producer of the log."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.handles: list[Handle] = []

    async def __call__(self, message: Message) -> Stored:
        self.sent.append(message.body)
        self.handles.append(Handle())
        return self.handles[-1]


def copier(admin: Admin, client: Client, fallback: Fallback) -> LogCopier:
    resources = cast(
        PulsarResources, type("R", (), {"admin": admin, "client": client, "producers": Cache()})
    )
    return LogCopier(resources, LOG, fallback, in_flight=8)


def test_the_producer_names_are_the_same_everywhere_and_one_per_topic() -> None:
    assert copier_name(ORDERS) == copier_name(ORDERS)
    assert copier_name(ORDERS) != copier_name(PAYMENTS)
    assert copier_name(ORDERS).startswith("starlight-feed-")


async def test_each_source_topic_has_its_named_producer_and_the_offsets_as_ids() -> None:
    admin, client, fallback = Admin(["Enabled"]), Client(), Fallback()
    copies = copier(admin, client, fallback)
    await copies.start()
    assert copies.deduplicated and admin.policies == []
    first, second, third = MessageId(7, 0), MessageId(7, 1), MessageId(9, 4, 2)
    await copies.copy(ORDERS, first, message_with(b"a"))
    await copies.copy(PAYMENTS, third, message_with(b"c"))
    await copies.copy(ORDERS, second, message_with(b"b"))
    orders, payments = client.producers
    assert (orders.topic, orders.options.producer_name) == (LOG, copier_name(ORDERS))
    assert payments.options.producer_name == copier_name(PAYMENTS)
    # Batching off: the broker judges a batch by its first sequence id.
    assert not orders.options.batching_enabled and orders.options.max_pending_messages == 8
    assert orders.sent == [(b"a", offset_of(first)), (b"b", offset_of(second))]
    assert payments.sent == [(b"c", offset_of(third))]
    assert fallback.sent == []
    await copies.aclose()
    assert orders.closed and payments.closed


async def test_a_position_past_the_packing_goes_through_the_ordinary_producer_in_order() -> None:
    admin, client, fallback = Admin(["Enabled"]), Client(), Fallback()
    copies = copier(admin, client, fallback)
    await copies.start()
    await copies.copy(ORDERS, MessageId(7, 0), message_with(b"a"))
    [orders] = client.producers
    done: list[str] = []

    async def unnamed() -> None:
        await copies.copy(ORDERS, MessageId(7, 2**20), message_with(b"big"))
        done.append("big")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(unnamed)
        await trio.testing.wait_all_tasks_blocked()
        assert fallback.sent == []  # not before the copy in flight is stored
        orders.handles[0].event.set()
        await trio.testing.wait_all_tasks_blocked()
        assert fallback.sent == [b"big"] and done == []  # and stored before the next
        fallback.handles[0].event.set()
    assert done == ["big"]
    await copies.copy(ORDERS, MessageId(8, 0), message_with(b"next"))
    assert orders.sent[-1] == (b"next", offset_of(MessageId(8, 0)))


async def test_without_the_brokers_deduplication_copies_go_as_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin, client, fallback = Admin(["Disabled"]), Client(), Fallback()
    copies = copier(admin, client, fallback)
    await copies.start()  # sets the policy, waits for it, gives up: at least once
    assert admin.policies == [(LOG, DEDUPLICATION, True)]
    assert not copies.deduplicated
    await copies.copy(ORDERS, MessageId(7, 0), message_with(b"a"))
    await copies.copy(ORDERS, MessageId(7, 1), message_with(b"b"))
    assert fallback.sent == [b"a", b"b"] and client.producers == []


async def test_a_stream_declared_before_gets_the_policy_and_waits_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin = Admin(["Disabled", "Disabled", "Recovering", "Enabled"])
    copies = copier(admin, Client(), Fallback())
    await copies.start()
    assert admin.policies == [(LOG, DEDUPLICATION, True)]
    assert copies.deduplicated


async def test_producers_of_topics_idle_for_long_are_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin, client = Admin(["Enabled"]), Client()
    copies = copier(admin, client, Fallback())
    await copies.start()
    await copies.copy(ORDERS, MessageId(7, 0), message_with(b"a"))
    await trio.sleep(IDLE)
    await copies.copy(PAYMENTS, MessageId(8, 0), message_with(b"b"))
    orders, payments = client.producers
    assert orders.closed and not payments.closed
    await copies.copy(ORDERS, MessageId(7, 1), message_with(b"c"))  # opened again
    assert client.producers[-1].sent == [(b"c", offset_of(MessageId(7, 1)))]
