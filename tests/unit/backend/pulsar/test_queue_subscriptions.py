"""A queue's subscriptions: one creation per (queue, topic) at a time, retried while another
replica creates it, the topic handed to consumers highest priority first; taken away from
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
        self.created: list[tuple[str, str]] = []
        self.deleted: list[tuple[str, str]] = []
        self.release = trio.Event()
        self.release.set()
        self.fail_delete = False

    async def create_subscription(self, topic: str, name: str, position: str) -> None:
        await self.release.wait()
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
