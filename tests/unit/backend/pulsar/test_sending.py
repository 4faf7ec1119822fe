"""``Sending.send_now`` (sending.py): the publish written at once, without waiting. What it
may write at once is decided once per view and set of prepared keys; these tests hold that
a new view, a key the leader unregistered and a headers exchange are each decided again.
Fakes stand in for the catalog, the length limits and Pulsar's producers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from gateway.backend.interface import Message
from gateway.backend.pulsar.publish_routes import PublishRoutes
from gateway.backend.pulsar.sending import Sending
from gateway.model.entities import Exchange, ExchangeType
from gateway.model.naming import topic_for
from gateway.model.vhost import Namespace

NAMESPACE = Namespace("public", "test")
DIRECT = Exchange("orders", ExchangeType.DIRECT)
HEADERS = Exchange("by-header", ExchangeType.HEADERS)
NO_PROPERTIES = b"\x00\x00"


@dataclass
class View:
    """What send_now reads of a view: exchange bindings, and (through the fake catalog)
    which (exchange, key) pairs route to a queue."""

    routed: set[tuple[str, str]]
    exchange_bindings: frozenset[object] = frozenset()


@dataclass
class Catalog:
    asked: int = 0

    def routes(self, view: View, exchange: Exchange, message: Message) -> set[str]:
        self.asked += 1
        return {"q"} if (exchange.name, message.routing_key) in view.routed else set()


class Limits:
    def of(self, view: View) -> dict[str, object]:
        return {}


@dataclass
class Producers:
    written: list[str] = field(default_factory=list)

    def submit_now(self, topic: str, payload: bytes, properties: dict[str, str]) -> object:
        self.written.append(topic)
        return object()


@dataclass
class Resources:
    producers: Producers = field(default_factory=Producers)
    lazy_subscriptions: bool = True


@dataclass
class Publisher:
    """A ``Sending`` over the fakes, with ``orders``/``new`` prepared (its subscriptions
    made, as ``PublishRoutes.prepare`` leaves a key)."""

    catalog: Catalog = field(default_factory=Catalog)
    resources: Resources = field(default_factory=Resources)

    def __post_init__(self) -> None:
        async def subscribe(topic: str, queue: str) -> None:
            raise AssertionError("send_now prepares nothing")

        catalog, resources = cast(Any, self.catalog), cast(Any, self.resources)
        self.routes = PublishRoutes(catalog, NAMESPACE, resources, subscribe)
        self.routes.prepared_keys.add(("orders", "new"))
        self.sending = Sending(catalog, NAMESPACE, resources, self.routes, cast(Any, Limits()))

    @property
    def written(self) -> list[str]:
        return self.resources.producers.written

    def publish(self, exchange: Exchange, key: str, view: View) -> object | None:
        message = Message(exchange.name, key, NO_PROPERTIES, b"body")
        return self.sending.send_now(exchange, message, cast(Any, view))


def test_a_routed_key_is_written_to_its_topic_and_decided_once_per_view() -> None:
    publisher = Publisher()
    view = View(routed={("orders", "new")})
    assert publisher.publish(DIRECT, "new", view) is not None
    assert publisher.publish(DIRECT, "new", view) is not None
    assert publisher.written == [topic_for(NAMESPACE, "orders", "new")] * 2
    assert publisher.catalog.asked == 1


def test_a_new_view_decides_again() -> None:
    publisher = Publisher()
    assert publisher.publish(DIRECT, "new", View(routed={("orders", "new")})) is not None
    # The binding is gone in the next view: unroutable here, left to ``send``.
    assert publisher.publish(DIRECT, "new", View(routed=set())) is None
    assert len(publisher.written) == 1


def test_a_key_the_leader_unregistered_is_prepared_again() -> None:
    publisher = Publisher()
    view = View(routed={("orders", "new")})
    assert publisher.publish(DIRECT, "new", view) is not None
    publisher.routes.forget_unregistered({})  # same view, but the key has to be prepared again
    assert publisher.publish(DIRECT, "new", view) is None
    assert len(publisher.written) == 1


def test_a_headers_exchange_is_decided_for_each_message() -> None:
    publisher = Publisher()
    view = View(routed={("by-header", "")})
    assert publisher.publish(HEADERS, "", view) is not None
    assert publisher.publish(HEADERS, "", view) is not None
    assert publisher.catalog.asked == 2
