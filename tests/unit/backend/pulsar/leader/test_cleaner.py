"""The leader's cleaner and reconciler (backend/pulsar/leader/cleaner.py) over the memory store,
with Pulsar stood in for by the two calls they make (a topic's internal stats, creating a
subscription) and the vhost by what they ask of it. End to end on Pulsar: tests/integration/fleet
(drains) and tests/integration/backend."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gateway.backend.pulsar.leader.cleaner import (
    BINDINGS_PER_TURN,
    SubscriptionCleaner,
    SubscriptionReconciler,
    acknowledged_up_to,
    repeat_rounds,
)
from gateway.backend.pulsar.leader.scope import LeaderScope
from gateway.backend.pulsar.vhost import PulsarVirtualHost
from gateway.metadata.memory import MemoryMetadataStore
from gateway.metadata.store import REMOVE, DrainRecord, VhostView
from gateway.model.entities import Binding, Exchange, ExchangeType, Queue
from gateway.model.naming import subscription_for
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import AdminError, NotFound
from tests.support.turns import turns_during

NS = "t/n"
PREFIX = "persistent://t/n/"


class FakeStats:
    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document

    def json(self) -> dict[str, Any]:
        return self._document


class FakeAdmin:
    """Cursors by topic (a topic missing here does not exist), and subscriptions created."""

    def __init__(self) -> None:
        self.cursors: dict[str, dict[str, Any]] = {}
        self.subscriptions: set[tuple[str, str]] = set()
        self.refuse = False

    async def request(self, method: str, path: str) -> FakeStats:
        topic = PREFIX + path.rsplit("/", 2)[-2]
        if topic not in self.cursors:
            raise NotFound(404, method, path, "Topic not found")
        return FakeStats({"cursors": self.cursors[topic]})

    async def create_subscription(self, topic: str, subscription: str, position: str) -> bool:
        if self.refuse:
            raise AdminError(500, "PUT", topic, "broker down")
        created = (topic, subscription) not in self.subscriptions
        self.subscriptions.add((topic, subscription))
        return created


class FakeVhost:
    """What the cleaner asks of PulsarVirtualHost: which topics a queue reads or is bound to,
    and removing a subscription (with its REMOVE record, as the real one does)."""

    def __init__(self, store: MemoryMetadataStore) -> None:
        self.store = store
        self.bound: dict[str, set[str]] = {}
        self.removed: list[tuple[str, str]] = []
        # (queue, topic) reaching queues through exchange bindings (the reconciler checks
        # those too).
        self.fed: set[tuple[str, str]] = set()

    def topic(self, local: str) -> str:
        return PREFIX + local

    def bound_topics(self, view: VhostView, queue: str) -> set[str]:
        return self.bound.get(queue, set())

    def needs(self, view: VhostView, queue: str, topic: str) -> bool:
        return queue in view.queues and topic in self.bound.get(queue, set())

    def binding_topics(self, view: VhostView, binding: Binding) -> list[str]:
        return [PREFIX + key for key in sorted(view.topic_keys.get(binding.exchange, ()))]

    def fed_through_exchanges(self, view: VhostView) -> set[tuple[str, str]]:
        return set(self.fed)

    async def remove_subscription(self, queue: str, topic: str) -> bool:
        self.removed.append((queue, topic))
        local = topic.removeprefix(PREFIX)
        stored = await self.store.read_drain(NS, queue, local)
        if stored is not None and stored[0].removing:
            await self.store.update_drain(NS, queue, local, None, version=stored[1])
        return True


def _cursor(position: str) -> dict[str, str]:
    return {"markDeletePosition": position}


async def _setup(record: DrainRecord) -> tuple[MemoryMetadataStore, FakeVhost, FakeAdmin]:
    """Queue ``q`` with a drain record on topic ``k`` (its unbind's)."""
    store = MemoryMetadataStore()
    await store.open(NS)
    await store.create_queue(NS, Queue("q"))
    await store.create_exchange(NS, Exchange("x", ExchangeType.DIRECT))
    await store.add_binding(NS, Binding("q", "x", "k"))
    await store.remove_binding(NS, Binding("q", "x", "k"), drains={"k": record})
    return store, FakeVhost(store), FakeAdmin()


def _cleaner(store: MemoryMetadataStore, vhost: FakeVhost, admin: FakeAdmin) -> SubscriptionCleaner:
    return SubscriptionCleaner(_scope(store, vhost, admin))


def _scope(store: MemoryMetadataStore, vhost: FakeVhost, admin: FakeAdmin) -> LeaderScope:
    return LeaderScope(cast(PulsarVirtualHost, vhost), store, cast(PulsarAdmin, admin), NS)


async def test_the_acknowledged_position_is_read_from_the_cursor() -> None:
    admin = FakeAdmin()
    subscription = subscription_for("q")
    # The broker names cursors URL-encoded.
    admin.cursors[PREFIX + "k"] = {subscription.replace("=", "%3D"): _cursor("3:7")}
    admin.cursors[PREFIX + "bad"] = {subscription: _cursor("not-a-position")}
    admin.cursors[PREFIX + "none"] = {}
    fake = cast(PulsarAdmin, admin)
    assert await acknowledged_up_to(fake, PREFIX + "k", subscription) == (3, 7)
    assert await acknowledged_up_to(fake, PREFIX + "bad", subscription) is None
    assert await acknowledged_up_to(fake, PREFIX + "none", subscription) is None
    with pytest.raises(NotFound):
        await acknowledged_up_to(fake, PREFIX + "missing", subscription)


async def test_a_drained_subscription_is_removed_a_round_after() -> None:
    store, vhost, admin = await _setup(DrainRecord((5, 9)))
    cleaner = _cleaner(store, vhost, admin)
    admin.cursors[PREFIX + "k"] = {subscription_for("q"): _cursor("5:3")}
    await cleaner.round()
    assert store.view(NS).drains == {("q", "k"): DrainRecord((5, 9))}  # still draining

    admin.cursors[PREFIX + "k"] = {subscription_for("q"): _cursor("5:9")}
    await cleaner.round()
    assert store.view(NS).drains == {("q", "k"): REMOVE}  # drained: to be removed
    assert vhost.removed == []  # not in the same round: consumers must see the record first

    await cleaner.round()
    assert vhost.removed == [("q", PREFIX + "k")]
    assert store.view(NS).drains == {}


async def test_a_queue_bound_again_keeps_its_subscription() -> None:
    store, vhost, admin = await _setup(DrainRecord((5, 9), resumed=(6, 0)))
    cleaner = _cleaner(store, vhost, admin)
    admin.cursors[PREFIX + "k"] = {subscription_for("q"): _cursor("5:20")}
    await cleaner.round()  # past the end, not yet past the rebind
    assert ("q", "k") in store.view(NS).drains
    admin.cursors[PREFIX + "k"] = {subscription_for("q"): _cursor("6:0")}
    await cleaner.round()
    assert store.view(NS).drains == {}  # only the record goes
    assert vhost.removed == []


async def test_a_record_of_a_subscription_that_is_not_there_is_dropped() -> None:
    store, vhost, admin = await _setup(DrainRecord((5, 9)))
    cleaner = _cleaner(store, vhost, admin)
    admin.cursors[PREFIX + "k"] = {}  # the topic has no such subscription: nothing to drain
    await cleaner.round()
    assert store.view(NS).drains == {}
    assert vhost.removed == []


async def test_a_removal_whose_queue_reads_the_topic_again_only_drops_the_record() -> None:
    store, vhost, admin = await _setup(REMOVE)
    cleaner = _cleaner(store, vhost, admin)
    await cleaner.round()  # seen
    vhost.bound["q"] = {PREFIX + "k"}  # bound again meanwhile
    await cleaner.round()
    assert vhost.removed == []
    assert store.view(NS).drains == {}


async def test_the_reconciler_repairs_a_pattern_binding_without_its_subscription() -> None:
    store = MemoryMetadataStore()
    await store.open(NS)
    await store.create_queue(NS, Queue("q"))
    await store.create_exchange(NS, Exchange("t", ExchangeType.TOPIC))
    await store.add_binding(NS, Binding("q", "t", "a.*"))
    await store.add_binding(NS, Binding("q", "t", "literal.key"))
    await store.register_topic_key(NS, "t", "a.b")
    vhost, admin = FakeVhost(store), FakeAdmin()
    repaired: list[tuple[str, str]] = []
    reconciler = SubscriptionReconciler(
        _scope(store, vhost, admin), lambda queue, topic: repaired.append((queue, topic))
    )
    # Literal bindings subscribe before they are written: only the pattern is checked.
    assert await reconciler.expected(store.view(NS)) == {("q", PREFIX + "a.b")}
    admin.refuse = True
    await reconciler.round()  # Pulsar refused: checked again next round
    admin.refuse = False
    await reconciler.round()
    assert repaired == [("q", PREFIX + "a.b")]
    assert admin.subscriptions == {(PREFIX + "a.b", subscription_for("q"))}
    await reconciler.round()  # verified this term: not asked again
    assert repaired == [("q", PREFIX + "a.b")]
    # Topics that reach a queue through exchange bindings are checked too.
    vhost.fed = {("q", PREFIX + "upstream")}
    assert await reconciler.expected(store.view(NS)) == {("q", PREFIX + "a.b"), *vhost.fed}
    await reconciler.round()
    assert repaired == [("q", PREFIX + "a.b"), ("q", PREFIX + "upstream")]


async def test_rounds_go_on_after_a_failure_and_end_with_the_namespace() -> None:
    rounds: list[str] = []

    async def one_round() -> None:
        rounds.append("round")
        if len(rounds) == 1:
            raise RuntimeError("a bad round")
        raise KeyError(NS)  # the namespace was closed here

    await repeat_rounds("cleaner", NS, one_round, 0)
    assert rounds == ["round", "round"]


async def test_the_reconcilers_walk_over_many_bindings_lets_other_tasks_run() -> None:
    count = 3 * BINDINGS_PER_TURN
    view = VhostView(
        exchanges={"d": Exchange("d", ExchangeType.DIRECT)},
        bindings=frozenset(Binding(f"q{i}", "d", f"k{i}") for i in range(count)),
    )
    store = MemoryMetadataStore()
    reconciler = SubscriptionReconciler(_scope(store, FakeVhost(store), FakeAdmin()))
    expected, turns = await turns_during(reconciler.expected(view))
    assert expected == set()  # direct bindings: nothing to check
    assert turns >= count // BINDINGS_PER_TURN - 1
