"""The first publish to a new key (publish_routes.py): its subscriptions and its producer are
made together, not one after the other, and so are the subscriptions of a key's queues. Fakes
stand in for ZooKeeper and Pulsar; what the handshake itself guarantees is tested end to end
in tests/integration/fleet."""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.backend.pulsar.publish_routes import PublishRoutes
from gateway.metadata.values import ExchangeEdges
from gateway.model.entities import DEFAULT_EXCHANGE, Exchange, ExchangeType
from gateway.model.naming import topic_for
from gateway.model.vhost import Namespace
from gateway.pulsar.errors import PulsarClientError

NAMESPACE = Namespace("public", "test")
TOPIC = topic_for(NAMESPACE, DEFAULT_EXCHANGE, "q")


@dataclass
class Queue:
    arguments: dict[str, Any] = field(default_factory=dict)


class Store:
    async def register_topic_key(self, namespace: str, exchange: str, key: str) -> None:
        pass

    async def sync_queue(self, namespace: str, name: str) -> Queue:
        return Queue()


class Catalog:
    namespace = "public/test"

    async def write(self, step: Coroutine[Any, Any, Any]) -> Any:
        return await step


class Producers:
    def __init__(self, error: Exception | None = None) -> None:
        self.asked = trio.Event()
        self.topics: list[str] = []
        self._error = error

    async def get(self, topic: str) -> object:
        self.topics.append(topic)
        self.asked.set()
        if self._error is not None:
            raise self._error
        return object()


@dataclass
class Resources:
    producers: Producers
    nursery: trio.Nursery
    store: Store = field(default_factory=Store)
    lazy_subscriptions: bool = True


def routes_with(resources: Resources, subscribed: list[tuple[str, str]]) -> PublishRoutes:
    async def subscribe(topic: str, queue: str) -> None:
        # Sequential creation would ask for the producer only after this returns: then this
        # wait fails instead of passing.
        with trio.fail_after(10):
            await resources.producers.asked.wait()
        subscribed.append((topic, queue))

    return PublishRoutes(cast(Any, Catalog()), NAMESPACE, cast(Any, resources), subscribe)


async def test_a_new_key_gets_its_producer_while_it_is_subscribed() -> None:
    subscribed: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        resources = Resources(Producers(), nursery)
        routes = routes_with(resources, subscribed)
        default = Exchange(DEFAULT_EXCHANGE, ExchangeType.DIRECT)
        assert await routes.prepare(default, "q")
        assert await routes.prepare(default, "q") is False  # prepared once
    assert subscribed == [(TOPIC, "q")]
    assert resources.producers.topics == [TOPIC]


@pytest.mark.parametrize(
    "error", [PulsarClientError("Timeout", "no producer"), RuntimeError("unexpected")]
)
async def test_a_producer_that_cannot_be_made_is_left_to_the_publish(error: Exception) -> None:
    """Nor does its failure end the nursery the vhosts' background work shares."""
    subscribed: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        resources = Resources(Producers(error), nursery)
        routes = routes_with(resources, subscribed)
        assert await routes.prepare(Exchange(DEFAULT_EXCHANGE, ExchangeType.DIRECT), "q")
    assert subscribed == [(TOPIC, "q")]


async def test_the_default_exchanges_empty_key_is_not_registered() -> None:
    """No queue is named "": nothing to subscribe, no topic, no key for the leader to sweep."""
    registered: list[tuple[str, str]] = []

    class RecordingStore(Store):
        async def register_topic_key(self, namespace: str, exchange: str, key: str) -> None:
            registered.append((exchange, key))

    subscribed: list[tuple[str, str]] = []
    async with trio.open_nursery() as nursery:
        resources = Resources(Producers(), nursery, RecordingStore())
        routes = routes_with(resources, subscribed)
        assert await routes.prepare(Exchange(DEFAULT_EXCHANGE, ExchangeType.DIRECT), "") is False
        assert await routes.prepare(Exchange(DEFAULT_EXCHANGE, ExchangeType.DIRECT), "q")
    assert registered == [(DEFAULT_EXCHANGE, "q")]
    assert subscribed == [(TOPIC, "q")]
    assert resources.producers.topics == [TOPIC]


class BoundStore(Store):
    """A direct exchange ``orders`` whose key ``k`` is bound to three queues."""

    async def sync_edges_of(self, namespace: str, exchange: str) -> ExchangeEdges:
        return ExchangeEdges(queues=frozenset({("a", "k"), ("b", "k"), ("c", "k"), ("d", "x")}))


class BoundCatalog(Catalog):
    async def find_exchange(self, name: str) -> Exchange | None:
        return ORDERS if name == ORDERS.name else None


ORDERS = Exchange("orders", ExchangeType.DIRECT)
ORDERS_K = topic_for(NAMESPACE, "orders", "k")


async def test_a_key_bound_to_several_queues_subscribes_them_all_at_once() -> None:
    """One creation after the other, the first publish to the key waited for their sum."""
    entered: list[str] = []
    all_in = trio.Event()

    async def subscribe(topic: str, queue: str) -> None:
        entered.append(queue)
        if len(entered) == 3:
            all_in.set()
        with trio.fail_after(10):  # one at a time, the first would wait here for ever
            await all_in.wait()

    async with trio.open_nursery() as nursery:
        resources = Resources(Producers(), nursery, BoundStore())
        routes = PublishRoutes(
            cast(Any, BoundCatalog()), NAMESPACE, cast(Any, resources), subscribe
        )
        assert await routes.prepare(ORDERS, "k")
    assert sorted(entered) == ["a", "b", "c"]
    assert ("orders", "k") in routes.prepared_keys


async def test_one_failed_subscription_fails_the_publish_once_the_others_are_made() -> None:
    made: list[str] = []

    async def subscribe(topic: str, queue: str) -> None:
        if queue == "b":
            raise AMQPError(ReplyCode.INTERNAL_ERROR, "subscribing queue 'b': broker refuses")
        await trio.sleep(0)
        made.append(queue)

    async with trio.open_nursery() as nursery:
        resources = Resources(Producers(), nursery, BoundStore())
        routes = PublishRoutes(
            cast(Any, BoundCatalog()), NAMESPACE, cast(Any, resources), subscribe
        )
        with pytest.raises(AMQPError, match="queue 'b'"):
            await routes.prepare(ORDERS, "k")
    assert sorted(made) == ["a", "c"]  # not cancelled halfway
    assert ("orders", "k") not in routes.prepared_keys  # the next publish tries again
