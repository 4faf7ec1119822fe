"""model/graph.py: routing through exchange bindings, against a literal transcription of
RabbitMQ's worklist (``rabbit_exchange:route1``), on random graphs with cycles, self-bindings,
alternate exchanges (missing ones too) and all four exchange types.

What is checked is the whole design, not only the walk: the writes a publisher makes, read by
consumers that admit what ``deliveries`` says and skip what a write marks, give every queue
RabbitMQ would route to exactly one copy and no other queue any; every such queue subscribes
to the topic it gets it from (``reach``); a queue that does not filter (``filtered``) only ever
gets messages that are its own; and a snapshot judges a message as the graph it was taken
from does.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType
from gateway.model.graph import RoutingGraph, Write, binding_passes
from gateway.model.routing import Router, headers_match, topic_matches

EXCHANGES = [f"x{i}" for i in range(6)]
QUEUES = [f"q{i}" for i in range(4)]
KEYS = ["a", "b", "a.b", ""]
PATTERNS = ["a", "b", "a.b", "", "*", "#", "a.*", "#.b"]
HEADERS_ARGS = [
    {},
    {"h": Field("S", "1")},
    {"x-match": Field("S", "any"), "h": Field("S", "1"), "g": Field("S", "2")},
    {"g": Field("V", None)},
]
MESSAGE_HEADERS = [None, {"h": Field("S", "1")}, {"g": Field("S", "2")}, {"h": Field("S", "2")}]


class Topology:
    def __init__(
        self,
        types: Mapping[str, ExchangeType],
        bindings: list[Binding],
        edges: list[ExchangeBinding],
        alternates: Mapping[str, str],
    ) -> None:
        self.exchanges = {
            name: Exchange(
                name,
                kind,
                arguments={"alternate-exchange": Field("S", alternates[name])}
                if name in alternates
                else {},
            )
            for name, kind in types.items()
        }
        self.bindings = bindings
        self.edges = edges
        self.alternates = alternates
        self.graph = RoutingGraph(self.exchanges.get, self.router, edges)

    def router(self, exchange: Exchange) -> Router:
        return Router(exchange.type, [b for b in self.bindings if b.exchange == exchange.name])

    def alternate(self, exchange: Exchange) -> Exchange | None:
        name = self.alternates.get(exchange.name)
        return None if name is None else self.exchanges.get(name)

    def bound_to(self, queue: str) -> set[str]:
        return {b.exchange for b in self.bindings if b.queue == queue}


def _matches(
    kind: ExchangeType,
    binding_key: str,
    arguments: Mapping[str, Field],
    key: str,
    headers: Mapping[str, Field] | None,
) -> bool:
    if kind is ExchangeType.DIRECT:
        return binding_key == key
    if kind is ExchangeType.TOPIC:
        return topic_matches(binding_key, key)
    if kind is ExchangeType.HEADERS:
        return headers_match(arguments, headers)
    return True


def rabbitmq_route(
    topology: Topology, published_to: str, key: str, headers: Mapping[str, Field] | None
) -> set[str]:
    """rabbit_exchange:route1, transcribed: a worklist, each exchange once, queues in a set,
    an exchange whose bindings match nothing passes the message on to its alternate."""
    worklist = [published_to]
    seen = {published_to}
    queues: set[str] = set()
    while worklist:
        name = worklist.pop()
        kind = topology.exchanges[name].type
        destinations: list[tuple[str, str]] = [
            ("queue", b.queue)
            for b in topology.bindings
            if b.exchange == name and _matches(kind, b.routing_key, b.arguments, key, headers)
        ]
        destinations += [
            ("exchange", e.destination)
            for e in topology.edges
            if e.source == name and _matches(kind, e.routing_key, e.arguments, key, headers)
        ]
        if not destinations and name in topology.alternates:
            destinations.append(("exchange", topology.alternates[name]))
        for what, target in destinations:
            if what == "queue":
                queues.add(target)
            elif target not in seen:
                seen.add(target)
                if target in topology.exchanges:  # cons_if_present
                    worklist.append(target)
    return queues


@st.composite
def topologies(draw: st.DrawFn) -> Topology:
    count = draw(st.integers(1, len(EXCHANGES)))
    names = EXCHANGES[:count]
    types = {name: draw(st.sampled_from(list(ExchangeType))) for name in names}

    def binding_key(name: str) -> str:
        return draw(st.sampled_from(PATTERNS if types[name] is ExchangeType.TOPIC else KEYS))

    def arguments(name: str) -> dict[str, Field]:
        if types[name] is ExchangeType.HEADERS:
            return dict(draw(st.sampled_from(HEADERS_ARGS)))
        return {}

    bindings = []
    for _ in range(draw(st.integers(0, 8))):
        exchange = draw(st.sampled_from(names))
        queue = draw(st.sampled_from(QUEUES))
        bindings.append(Binding(queue, exchange, binding_key(exchange), arguments(exchange)))
    edges = []
    for _ in range(draw(st.integers(0, 9))):
        source = draw(st.sampled_from(names))
        destination = draw(st.sampled_from(names))  # self-bindings and cycles included
        edges.append(ExchangeBinding(source, destination, binding_key(source), arguments(source)))
    alternates = {}
    for name in names:
        if draw(st.booleans()):
            alternates[name] = draw(st.sampled_from([*names, "missing"]))
    return Topology(types, list(set(bindings)), list(set(edges)), alternates)


# "c" is bound by patterns only: many exchanges match nothing, and pass messages on.
@st.composite
def passing_on_topologies(draw: st.DrawFn) -> Topology:
    """Biased towards the rare case: exchanges reached through exchange bindings that match
    nothing and pass messages on to alternate exchanges, reached again by other paths."""
    base = draw(topologies())
    types = {name: exchange.type for name, exchange in base.exchanges.items()}
    for name in EXCHANGES:
        types.setdefault(name, draw(st.sampled_from(list(ExchangeType))))
    types["x0"] = ExchangeType.FANOUT
    edges = [*base.edges, *(ExchangeBinding("x0", f"x{i}") for i in (1, 2, 3))]
    alternates = {f"x{i}": draw(st.sampled_from(EXCHANGES[2:])) for i in (1, 2, 3)}
    for name, target in base.alternates.items():
        alternates.setdefault(name, target)
    bindings = [b for b in base.bindings if b.exchange in types]
    return Topology(types, bindings, list(set(edges)), alternates)


messages = st.tuples(st.sampled_from([*KEYS, "c"]), st.sampled_from(MESSAGE_HEADERS))


@settings(max_examples=400, deadline=None)
@given(topologies(), st.data(), messages)
def test_routes_as_rabbitmq_and_the_writes_deliver_each_queue_once(
    topology: Topology, data: st.DataObject, message: tuple[str, Mapping[str, Field] | None]
) -> None:
    published_to = data.draw(st.sampled_from(sorted(topology.exchanges)))
    _check_route(topology, published_to, *message)


@settings(max_examples=300, deadline=None)
@given(passing_on_topologies(), messages)
def test_alternate_exchanges_of_exchanges_reached_through_bindings(
    topology: Topology, message: tuple[str, Mapping[str, Field] | None]
) -> None:
    _check_route(topology, "x0", *message)


def _check_route(
    topology: Topology, published_to: str, key: str, headers: Mapping[str, Field] | None
) -> None:
    expected = rabbitmq_route(topology, published_to, key, headers)
    graph = topology.graph
    route = graph.route(
        topology.exchanges[published_to], key, headers, alternate=topology.alternate
    )
    assert route.queues == expected
    assert route.writes, "a publish always writes somewhere"
    delivered: list[str] = []
    for write in route.writes:
        exchange = write.exchange
        keyed = exchange.type.keyed
        for queue in graph.deliveries(exchange, key, headers) - write.skip:
            delivered.append(queue)
            # The queue subscribes to the topic the write goes to.
            assert queue in graph.reach(exchange, key if keyed else None)
    assert sorted(delivered) == sorted(expected)  # each queue once, no other queue


@settings(max_examples=300, deadline=None)
@given(topologies(), st.data(), messages)
def test_a_queue_that_does_not_filter_wants_every_message_of_its_topic(
    topology: Topology, data: st.DataObject, message: tuple[str, Mapping[str, Field] | None]
) -> None:
    key, headers = message
    graph = topology.graph
    source = topology.exchanges[data.draw(st.sampled_from(sorted(topology.exchanges)))]
    keyed = source.type.keyed
    delivered = graph.deliveries(source, key, headers)
    assert delivered <= graph.reach(source, key if keyed else None)
    for queue in graph.reach(source, key if keyed else None):
        if not graph.filtered(source, topology.bound_to(queue), keyed=keyed):
            assert queue in delivered, queue


@settings(max_examples=300, deadline=None)
@given(topologies(), st.data(), messages)
def test_a_snapshot_judges_as_its_graph(
    topology: Topology, data: st.DataObject, message: tuple[str, Mapping[str, Field] | None]
) -> None:
    key, headers = message
    graph = topology.graph
    source = topology.exchanges[data.draw(st.sampled_from(sorted(topology.exchanges)))]
    queue = data.draw(st.sampled_from(QUEUES))
    snapshot = graph.snapshot(source, queue, topology.bound_to(queue))
    judged = snapshot.graph()
    root = next((e for e in snapshot.exchanges if e.name == source.name), None)
    admitted = root is not None and queue in judged.deliveries(root, key, headers)
    assert admitted == (queue in graph.deliveries(source, key, headers))


def test_a_cycle_and_a_diamond_give_one_copy() -> None:
    fanout = ExchangeType.FANOUT
    topology = Topology(
        {"x": fanout, "a": fanout, "b": fanout},
        [Binding("q", "a"), Binding("q", "b")],
        [ExchangeBinding("x", "a"), ExchangeBinding("x", "b"), ExchangeBinding("a", "x")],
        {},
    )
    route = topology.graph.route(topology.exchanges["x"], "k", None, alternate=topology.alternate)
    assert route.queues == {"q"}
    assert route.writes == (Write(topology.exchanges["x"]),)


def test_an_intermediate_exchange_that_routes_nothing_passes_on_to_its_alternate() -> None:
    topology = Topology(
        {"x": ExchangeType.FANOUT, "e": ExchangeType.DIRECT, "ae": ExchangeType.FANOUT},
        [Binding("q", "e", "known"), Binding("caught", "ae"), Binding("q", "ae")],
        [ExchangeBinding("x", "e")],
        {"e": "ae"},
    )
    x, ae = topology.exchanges["x"], topology.exchanges["ae"]
    route = topology.graph.route(x, "unknown", None, alternate=topology.alternate)
    assert route.queues == {"caught", "q"}
    assert route.alternates_taken == ("e",)
    assert route.writes == (Write(x), Write(ae, frozenset()))
    known = topology.graph.route(x, "known", None, alternate=topology.alternate)
    assert known.queues == {"q"} and known.writes == (Write(x),)
    # ZooKeeper says e matches after all: no alternate.
    confirmed = topology.graph.route(
        x, "unknown", None, alternate=topology.alternate, matching={"e"}
    )
    assert confirmed.queues == set() and confirmed.writes == (Write(x),)


def test_the_published_to_exchange_gives_way_to_its_alternate_as_before() -> None:
    topology = Topology(
        {"x": ExchangeType.DIRECT, "ae": ExchangeType.FANOUT},
        [Binding("caught", "ae")],
        [],
        {"x": "ae"},
    )
    route = topology.graph.route(topology.exchanges["x"], "k", None, alternate=topology.alternate)
    assert route.writes == (Write(topology.exchanges["ae"]),)
    assert route.alternates_taken == ("x",)


def test_binding_passes() -> None:
    assert binding_passes(ExchangeType.DIRECT, "a", "a")
    assert not binding_passes(ExchangeType.DIRECT, "a", "b")
    assert binding_passes(ExchangeType.DIRECT, "a", None)
    assert binding_passes(ExchangeType.TOPIC, "a.*", "a.b")
    assert not binding_passes(ExchangeType.TOPIC, "a.*", "b")
    assert binding_passes(ExchangeType.HEADERS, "", "anything")
    assert binding_passes(ExchangeType.FANOUT, "x", "y")


def test_literal_keys_upstream_and_filtering() -> None:
    topology = Topology(
        {"d": ExchangeType.DIRECT, "t": ExchangeType.TOPIC, "f": ExchangeType.FANOUT},
        [Binding("q", "t", "a.*"), Binding("q", "d", "k")],
        [ExchangeBinding("d", "t", "a.b"), ExchangeBinding("f", "d"), ExchangeBinding("t", "t")],
        {},
    )
    graph = topology.graph
    d, t, f = (topology.exchanges[name] for name in "dtf")
    assert graph.literal_keys(d) == {"k", "a.b"}
    assert graph.literal_keys(t) == {""}  # "a.*" is a pattern; the self-binding's "" is not
    assert graph.upstream({"t"}) == {"t", "d", "f"}
    assert graph.downstream("f") == {"f", "d", "t"}
    assert not graph.filtered(d, {"t"}, keyed=True)
    assert graph.filtered(f, {"t", "d"}, keyed=False)  # the key decides, not the topic
    assert graph.reach(d, "a.b") == {"q"}
    assert graph.reach(d, "zzz") == frozenset()
