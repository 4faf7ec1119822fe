"""A queue's subscriptions: one creation per (queue, topic) at a time, retried while another
replica creates it, the topic handed to consumers highest priority first (in the background
for a publisher, which waits only for the subscription); taken away from
consumers and the Basic.Get consumer before the subscription and its REMOVE record go; and
deleted at once only when no other replica has a consumer of the queue."""

from __future__ import annotations

from typing import Any, cast

import pytest
import trio
import trio.testing

from gateway.amqp.errors import AMQPError
from gateway.backend.catalog import Catalog
from gateway.backend.pulsar.delivery import PulsarQueueSubscription
from gateway.backend.pulsar.queue_subscriptions import SUBSCRIBE_ATTEMPTS, QueueSubscriptions
from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.resources import PulsarResources
from gateway.metadata.store import DrainRecord, VhostView
from gateway.model.naming import subscription_for
from gateway.pulsar.errors import PreconditionFailed

NAMESPACE = "t/n"
TOPIC = "persistent://t/n/orders__k"
SUBSCRIPTION = subscription_for("orders")


class Admin:
    """Pulsar's admin API as far as subscriptions go; ``busy``: how many creations answer
    412 (another replica's creation under way) before one succeeds."""

    def __init__(self, busy: int = 0) -> None:
        self.busy = busy
        # Creations that fail as Pulsar fails while it recovers from an outage.
        self.failing = 0
        self.created: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str]] = []
        self.release = trio.Event()
        self.release.set()
        self.fail_delete = False

    async def create_subscription(self, topic: str, name: str, position: str) -> None:
        await self.release.wait()
        if self.failing:
            self.failing -= 1
            raise RuntimeError("Not enough non-faulty bookies available")
        if self.busy:
            self.busy -= 1
            raise PreconditionFailed(412, "PUT", topic, "Subscription Busy")
        self.created.append((topic, name))

    async def delete_subscription(self, topic: str, name: str, *, force: bool) -> None:
        if self.fail_delete:
            raise RuntimeError("broker unavailable")
        self.deleted.append((topic, name))


class Store:
    def __init__(self) -> None:
        self.drains: dict[tuple[str, str], tuple[DrainRecord, int]] = {}

    async def read_drain(self, namespace: str, queue: str, local: str) -> Any:
        return self.drains.get((queue, local))

    async def update_drain(
        self, namespace: str, queue: str, local: str, record: Any, *, version: int
    ) -> None:
        assert record is None and self.drains[(queue, local)][1] == version
        del self.drains[(queue, local)]


class Resources:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.store = Store()
        self.nursery: trio.Nursery | None = None  # a test's own, for background work


class Catalog_:
    namespace = NAMESPACE


class Consumer:
    """A consumer of the queue on this replica: the topics it was given, in order."""

    def __init__(self, priority: int, given: list[tuple[int, str]]) -> None:
        self.priority = priority
        self.topics: list[str] = []
        self._given = given

    async def add_topic(self, topic: str) -> None:
        self._given.append((self.priority, topic))
        self.topics.append(topic)

    async def remove_topic(self, topic: str) -> None:
        self.topics.remove(topic)


class SlowConsumer(Consumer):
    """A consumer whose attach to a topic waits for ``attach``."""

    def __init__(self, priority: int, given: list[tuple[int, str]], attach: trio.Event) -> None:
        super().__init__(priority, given)
        self._attach = attach

    async def add_topic(self, topic: str) -> None:
        await self._attach.wait()
        await super().add_topic(topic)


class View:
    def __init__(self, consumers: dict[str, int]) -> None:
        self.consumers = consumers


def subscriptions_with(
    admin: Admin,
    consumers: dict[str, set[Consumer]] | None = None,
    getters: dict[str, Consumer] | None = None,
) -> tuple[QueueSubscriptions, Resources]:
    resources = Resources(admin)
    return (
        QueueSubscriptions(
            cast(Catalog, Catalog_()),
            cast(QueueTopics, QueueTopics),  # only its static local() is used
            cast(PulsarResources, resources),
            cast(dict[str, set[PulsarQueueSubscription]], consumers or {}),
            cast(dict[str, PulsarQueueSubscription], getters or {}),
        ),
        resources,
    )


async def test_concurrent_subscribes_create_once_and_give_the_highest_priority_first() -> None:
    given: list[tuple[int, str]] = []
    consumers = {"orders": {Consumer(0, given), Consumer(10, given), Consumer(5, given)}}
    admin = Admin()
    admin.release = trio.Event()  # the creation waits until both callers are in
    subscriptions, _ = subscriptions_with(admin, consumers)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(subscriptions.subscribe, TOPIC, "orders")
        nursery.start_soon(subscriptions.subscribe, TOPIC, "orders")
        await trio.testing.wait_all_tasks_blocked()
        admin.release.set()
    assert admin.created == [(TOPIC, SUBSCRIPTION)]
    # Each caller hands the topic on, highest priority first (twice: adding is idempotent
    # on a real consumer, and the waiter cannot know the creator's consumers took it).
    assert given == [(10, TOPIC), (5, TOPIC), (0, TOPIC)] * 2


@pytest.mark.parametrize("failing", [1, 2])
async def test_a_waiter_does_not_take_a_failed_creation_for_a_made_one(failing: int) -> None:
    # Issue 37: three publishers of one replica met the same pending creation; the first
    # failed (Pulsar refusing new topics after an outage), the others carried on as if the
    # subscription existed, and their confirmed messages went to a topic nobody read. Each
    # waiter now makes the subscription itself; only those whose own attempt fails fail.
    given: list[tuple[int, str]] = []
    admin = Admin()
    admin.failing = failing
    admin.release = trio.Event()  # the first creation waits until every caller is in
    subscriptions, _ = subscriptions_with(admin, {"orders": {Consumer(0, given)}})
    outcomes: list[str] = []

    async def publisher() -> None:
        try:
            await subscriptions.subscribe(TOPIC, "orders")
        except AMQPError as error:
            outcomes.append(f"refused {error.reply_code}")
        else:
            outcomes.append("subscribed")

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(publisher)
        await trio.testing.wait_all_tasks_blocked()
        admin.release.set()
    assert sorted(outcomes) == sorted(["refused 541"] * failing + ["subscribed"] * (3 - failing))
    assert admin.created == [(TOPIC, SUBSCRIPTION)]  # made once, by the first that could
    assert len(given) == 3 - failing  # only callers whose subscription exists hand it on


async def test_a_waiter_makes_the_subscription_when_the_creator_was_cancelled() -> None:
    admin = Admin()
    admin.release = trio.Event()
    subscriptions, _ = subscriptions_with(admin)
    creator = trio.CancelScope()
    waited = False

    async def creating() -> None:
        with creator:
            await subscriptions.subscribe(TOPIC, "orders")

    async def waiting() -> None:
        nonlocal waited
        await subscriptions.subscribe(TOPIC, "orders")
        waited = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(creating)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(waiting)
        await trio.testing.wait_all_tasks_blocked()
        creator.cancel()  # the creator's connection went away before Pulsar answered
        await trio.testing.wait_all_tasks_blocked()
        assert not waited  # the waiter's own creation now waits for Pulsar
        admin.release.set()
    assert waited and admin.created == [(TOPIC, SUBSCRIPTION)]


async def test_a_consumer_waits_for_creations_of_its_queue_under_way() -> None:
    admin = Admin()
    admin.release = trio.Event()
    subscriptions, _ = subscriptions_with(admin)
    waited = False

    async def consumer_attaches() -> None:
        nonlocal waited
        await subscriptions.creations_done("orders")
        waited = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(subscriptions.subscribe, TOPIC, "orders")
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(consumer_attaches)
        await trio.testing.wait_all_tasks_blocked()
        assert not waited
        admin.release.set()
    assert waited
    await subscriptions.creations_done("orders")  # nothing under way: at once


async def test_busy_is_retried_until_the_other_creation_is_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    admin = Admin(busy=SUBSCRIBE_ATTEMPTS - 1)
    subscriptions, _ = subscriptions_with(admin)
    await subscriptions.subscribe(TOPIC, "orders")
    assert admin.created == [(TOPIC, SUBSCRIPTION)]


async def test_busy_every_time_is_an_amqp_error(autojump_clock: trio.testing.MockClock) -> None:
    admin = Admin(busy=SUBSCRIBE_ATTEMPTS)
    subscriptions, _ = subscriptions_with(admin)
    with pytest.raises(AMQPError, match="subscribing queue 'orders'"):
        await subscriptions.subscribe(TOPIC, "orders")
    assert admin.created == []


async def test_unsubscribe_takes_the_topic_from_consumers_then_removes_it_and_its_record() -> None:
    given: list[tuple[int, str]] = []
    consumer, getter = Consumer(0, given), Consumer(0, given)
    consumer.topics, getter.topics = [TOPIC], [TOPIC]
    admin = Admin()
    subscriptions, resources = subscriptions_with(admin, {"orders": {consumer}}, {"orders": getter})
    resources.store.drains[("orders", "orders__k")] = (DrainRecord(), 3)
    await subscriptions.unsubscribe(TOPIC, "orders")
    assert consumer.topics == [] and getter.topics == []
    assert admin.deleted == [(TOPIC, SUBSCRIPTION)]
    assert resources.store.drains == {}


async def test_a_refused_removal_is_left_to_the_leader() -> None:
    admin = Admin()
    admin.fail_delete = True
    subscriptions, resources = subscriptions_with(admin)
    resources.store.drains[("orders", "orders__k")] = (DrainRecord(), 3)
    assert not await subscriptions.remove("orders", TOPIC)
    assert ("orders", "orders__k") in resources.store.drains  # the leader's to finish
    admin.fail_delete = False
    assert await subscriptions.remove("orders", TOPIC)


def test_alone_only_when_no_other_replica_has_a_consumer() -> None:
    consumers = {"orders": {Consumer(0, [])}}
    subscriptions, _ = subscriptions_with(Admin(), consumers)
    assert subscriptions.alone(cast(VhostView, View({"orders": 1})), "orders")
    assert not subscriptions.alone(cast(VhostView, View({"orders": 2})), "orders")
    assert subscriptions.alone(cast(VhostView, View({})), "idle")


async def test_a_publisher_goes_on_once_subscribed_and_consumers_get_the_topic_after() -> None:
    """The first publish to a topic waits for the subscription (which keeps its message),
    not for this replica's consumers to attach: they get the topic in the background,
    highest priority first, and one that fails does not stop the others."""
    given: list[tuple[int, str]] = []
    attach = trio.Event()

    class FailingConsumer(Consumer):
        async def add_topic(self, topic: str) -> None:
            raise RuntimeError("consumer closed meanwhile")

    slow = SlowConsumer(10, given, attach)
    consumers = {"orders": {slow, FailingConsumer(5, given), Consumer(0, given)}}
    admin = Admin()
    subscriptions, resources = subscriptions_with(admin, consumers)
    async with trio.open_nursery() as nursery:
        resources.nursery = nursery
        with trio.fail_after(10):  # waiting for the consumers would wait for ``attach``
            await subscriptions.subscribe_to_write(TOPIC, "orders")
        assert admin.created == [(TOPIC, SUBSCRIPTION)] and given == []
        attach.set()
    assert given == [(10, TOPIC), (0, TOPIC)]


async def test_a_publisher_whose_subscription_fails_gives_the_topic_to_nobody() -> None:
    given: list[tuple[int, str]] = []
    admin = Admin()
    admin.failing = 1
    subscriptions, resources = subscriptions_with(admin, {"orders": {Consumer(0, given)}})
    async with trio.open_nursery() as nursery:
        resources.nursery = nursery
        with pytest.raises(AMQPError):
            await subscriptions.subscribe_to_write(TOPIC, "orders")
    assert given == []


@pytest.mark.parametrize("slow", ["consumer", "getter"])
async def test_a_get_waits_until_the_topic_is_given(slow: str) -> None:
    """A Basic.Get right after a first publish waits for the background attach: on RabbitMQ
    the message goes to the ready consumer, and a Get attached first could take it. The
    queue's Basic.Get consumer gets the topic too, after the consumers, so that a Get after
    the confirm finds the message without waiting for the view's change."""
    given: list[tuple[int, str]] = []
    attach = trio.Event()
    consumers: dict[str, set[Consumer]] = {"orders": {Consumer(3, given)}}
    getters: dict[str, Consumer] = {"orders": SlowConsumer(-1, given, attach)}
    if slow == "consumer":
        consumers, getters = {"orders": {SlowConsumer(3, given, attach)}}, {}
    subscriptions, resources = subscriptions_with(Admin(), consumers, getters=getters)
    got: list[list[tuple[int, str]]] = []

    async def get() -> None:
        await subscriptions.gives_done("orders")
        got.append(list(given))

    async with trio.open_nursery() as nursery:
        resources.nursery = nursery
        await subscriptions.subscribe_to_write(TOPIC, "orders")
        nursery.start_soon(get)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        attach.set()
    assert got == [[(3, TOPIC)] if slow == "consumer" else [(3, TOPIC), (-1, TOPIC)]]
    with trio.fail_after(1):  # nothing under way: no wait
        await subscriptions.gives_done("orders")
