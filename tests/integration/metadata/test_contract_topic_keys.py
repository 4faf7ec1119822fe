"""The TopicKeys role's contract (gateway/metadata/roles.py), on the memory store and on ZooKeeper
(a store per replica, each with its own session). The routing keys of topic exchanges, and the
handshake of a pattern binding on one replica with a new key's first message on another."""

from __future__ import annotations

from gateway.metadata.roles import TopicKeys
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from tests.integration.metadata.conftest import Fleet, opened

ROLE = TopicKeys  # test_contract_roles.py: every role has its contract


async def test_topic_keys(fleet: Fleet, namespace: str) -> None:
    store = await opened(fleet, namespace)
    assert await store.register_topic_key(namespace, "amq.topic", "a.b") is True
    assert await store.register_topic_key(namespace, "amq.topic", "a.b") is False
    assert await store.register_topic_key(namespace, "amq.topic", "a.c") is True
    assert await store.register_topic_key(namespace, "orders", "x") is True
    assert dict(store.view(namespace).topic_keys) == {
        "amq.topic": frozenset({"a.b", "a.c"}),
        "orders": frozenset({"x"}),
    }


async def test_topic_keys_and_bindings_written_elsewhere_are_read_at_once(
    fleet: Fleet, namespace: str
) -> None:
    """The handshake of a pattern binding on one replica and a new key's first message on
    another (vhost.py): each reads the other's records straight after writing its own."""
    a = await opened(fleet, namespace)
    b = await opened(fleet, namespace)
    await a.create_exchange(namespace, Exchange("events", ExchangeType.TOPIC))
    await a.create_exchange(namespace, Exchange("other", ExchangeType.TOPIC))
    for round_ in range(10):  # the watch may win now and then; the sync always finds it
        queue = f"q{round_}"
        await a.create_queue(namespace, Queue(queue))
        await a.add_binding(namespace, Binding(queue, "events", f"k{round_}.*"))
        assert (queue, f"k{round_}.*") in await b.sync_bindings_of(namespace, "events")
        await b.register_topic_key(namespace, "events", f"k{round_}.new")
        await b.register_topic_key(namespace, "other", f"k{round_}.new")
        keys = await a.sync_topic_keys(namespace, "events")
        assert f"k{round_}.new" in keys
        assert f"k{round_}.new" in a.view(namespace).topic_keys["events"]
    assert await a.sync_topic_keys(namespace, "events") == {f"k{n}.new" for n in range(10)}
    assert await b.sync_bindings_of(namespace, "other") == frozenset()
    assert await b.sync_topic_keys(namespace, "nope") == frozenset()
    assert await b.sync_bindings_of(namespace, "nope") == frozenset()
