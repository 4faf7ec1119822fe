"""Admission's answer per topic, decided once per view: every change that can alter it (a view
change such as an exchange binding, a drain record, a purge) must be seen by the next message
of a topic that was admitted wholesale before."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.amqp.fieldtable import Field
from gateway.amqp.properties import MessageProperties, encode_properties
from gateway.backend.catalog import Catalog
from gateway.backend.interface import Message
from gateway.backend.pulsar.admission import Admission
from gateway.backend.pulsar.drains import Drains
from gateway.backend.pulsar.queue_topics import QueueTopics
from gateway.backend.pulsar.redeliveries import Redeliveries
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.values import DrainRecord
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue
from gateway.model.naming import encode_local_name, topic_for
from gateway.model.vhost import Namespace
from gateway.pulsar.ids import MessageId

NAMESPACE = Namespace("public", "admission")
NS = str(NAMESPACE)
FANOUT = Exchange("fan", ExchangeType.FANOUT)
DIRECT = Exchange("dir", ExchangeType.DIRECT)
QUEUE = "q"
FAN_TOPIC = topic_for(NAMESPACE, FANOUT.name)


@dataclass
class FakeReceived:
    topic: str
    message_id: MessageId
    id_bytes: bytes = b"id"
    redelivery_count: int = 0


def received_at(entry: int, topic: str = FAN_TOPIC) -> Any:
    return FakeReceived(topic, MessageId(1, entry))


def message(routing_key: str) -> Message:
    return Message(FANOUT.name, routing_key, b"\x00\x00", b"body")


async def vhost() -> tuple[MemoryMetadataStore, Drains, Admission]:
    store = MemoryMetadataStore()
    await store.open(NS)
    for exchange in (FANOUT, DIRECT):
        await store.create_exchange(NS, exchange)
    await store.create_queue(NS, Queue(QUEUE))
    catalog = Catalog("/", NS, store)
    topics = QueueTopics(catalog, NAMESPACE, lazy_subscriptions=False)
    drains = Drains(topics.prefix)
    return store, drains, Admission(catalog, topics, drains, Redeliveries())


async def test_an_exchange_binding_made_after_a_topic_was_admitted_wholesale_is_judged_by() -> None:
    store, _, admission = await vhost()
    await store.add_binding(NS, Binding(QUEUE, DIRECT.name, "k"))
    admits = admission.of(QUEUE)
    # A fanout topic in a vhost without exchange bindings: every message is the queue's.
    assert admits(message("other"), received_at(1))
    # The fanout exchange now reaches the queue only through the direct one, by key "k".
    await store.add_exchange_binding(NS, ExchangeBinding(FANOUT.name, DIRECT.name, "k"))
    assert not admits(message("other"), received_at(2))
    assert admits(message("k"), received_at(3))
    await store.remove_exchange_binding(NS, ExchangeBinding(FANOUT.name, DIRECT.name, "k"))
    assert admits(message("other"), received_at(4))


async def test_a_drain_recorded_after_a_topic_was_admitted_wholesale_excludes() -> None:
    store, drains, admission = await vhost()
    await store.add_binding(NS, Binding(QUEUE, FANOUT.name))
    admits = admission.of(QUEUE)
    assert admits(message("k"), received_at(5))
    # Unbound at entry 3, bound again at entry 7: what was written between is not the queue's.
    record = DrainRecord(end=(1, 3), resumed=(1, 7))
    await store.remove_binding(
        NS, Binding(QUEUE, FANOUT.name), drains={encode_local_name(FANOUT.name, None): record}
    )
    drains.refresh(store.view(NS))
    assert drains.get(QUEUE, FAN_TOPIC) is not None
    assert not admits(message("k"), received_at(5))
    assert admits(message("k"), received_at(2))


async def test_a_purge_recorded_after_a_topic_was_admitted_wholesale_drops_what_came_before() -> (
    None
):
    store, _, admission = await vhost()
    await store.add_binding(NS, Binding(QUEUE, FANOUT.name))
    admits = admission.of(QUEUE)
    assert admits(message("k"), received_at(5))
    admission.purged[(QUEUE, FAN_TOPIC)] = (1, 6)  # as PulsarVirtualHost.purge_subscribed
    assert not admits(message("k"), received_at(5))
    assert admits(message("k"), received_at(7))
    admission.forget(QUEUE)
    assert admits(message("k"), received_at(5))


async def test_a_headers_exchange_is_judged_message_by_message() -> None:
    store, _, admission = await vhost()
    headers = Exchange("hdr", ExchangeType.HEADERS)
    await store.create_exchange(NS, headers)
    wanted = {"x-match": Field("S", "all"), "a": Field("S", "1")}
    await store.add_binding(NS, Binding(QUEUE, headers.name, arguments=wanted))
    admits = admission.of(QUEUE)
    topic = topic_for(NAMESPACE, headers.name)

    def with_headers(**values: str) -> Message:
        fields = {name: Field("S", value) for name, value in values.items()}
        header = encode_properties(MessageProperties(headers=fields))
        return Message(headers.name, "", header, b"body")

    assert admits(with_headers(a="1"), received_at(1, topic))
    assert not admits(with_headers(a="2"), received_at(2, topic))
    assert admits(with_headers(a="1"), received_at(3, topic))
