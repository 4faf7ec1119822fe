"""The mirror's rules: listings diffed, replacements caught by cversion, own writes kept."""

from __future__ import annotations

import itertools
from dataclasses import replace
from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.metadata.codec import (
    TopicKey,
    binding_id,
    encode_binding,
    encode_exchange,
    encode_exchange_binding,
    encode_queue,
    exchange_binding_id,
    line_child,
    topic_key_child,
)
from gateway.metadata.mirror import Entity, NamespaceMirror, make_view
from gateway.metadata.paths import Folder, bucket_for, bucket_of, encode_name
from gateway.model.consumers import LinePlace
from gateway.model.entities import Binding, Exchange, ExchangeBinding, ExchangeType, Queue

Q = Folder.QUEUES


def _q(name: str, owner: str | None = None) -> tuple[str, str, bytes]:
    child = encode_name(name)
    queue = Queue(name, exclusive=owner is not None, owner=owner)
    return child, bucket_of(child), encode_queue(queue)


def test_a_listing_asks_for_new_children_and_drops_gone_ones() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a")
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=1) == [child]
    assert "a" not in mirror.snapshot().queues  # not read yet
    mirror.apply_data(Q, child, data)
    assert mirror.snapshot().queues["a"] == Queue("a")
    version = mirror.version
    # Nothing changed: nothing to read, version unchanged.
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=1) == []
    assert mirror.version == version
    # Gone.
    assert mirror.apply_bucket_listing(Q, bucket, [], cversion=2) == []
    assert "a" not in mirror.snapshot().queues
    assert mirror.version > version


def test_a_replacement_between_listings_is_caught_by_cversion() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a", owner="c1")
    mirror.apply_bucket_listing(Q, bucket, [child], cversion=1)
    mirror.apply_data(Q, child, data)
    # Deleted and re-created (another owner) between two listings: same names, cversion +2.
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=3) == [child]
    _, _, replaced = _q("a", owner="c2")
    mirror.apply_data(Q, child, replaced)
    assert mirror.snapshot().queues["a"].owner == "c2"


def test_own_writes_are_accounted_for() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, _ = _q("a")
    mirror.apply_bucket_listing(Q, bucket, [], cversion=0)
    mirror.own_created(Q, child, Queue("a"))
    assert mirror.snapshot().queues["a"] == Queue("a")
    # The listing after our create: +1, ours; nothing to read.
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=1) == []
    mirror.own_deleted(Q, child)
    assert "a" not in mirror.snapshot().queues
    assert mirror.apply_bucket_listing(Q, bucket, [], cversion=2) == []
    # Our create and someone else's delete + re-create: +3, one unaccounted pair: re-read.
    mirror.own_created(Q, child, Queue("a"))
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=5) == [child]


def test_a_read_older_than_a_listing_that_dropped_the_child_is_ignored() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a")
    mirror.apply_bucket_listing(Q, bucket, [child], cversion=1)
    mirror.apply_bucket_listing(Q, bucket, [], cversion=2)
    mirror.apply_data(Q, child, data)  # the read asked for after the first listing
    assert "a" not in mirror.snapshot().queues


def test_a_read_that_finds_nothing_removes_the_child() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a")
    mirror.apply_bucket_listing(Q, bucket, [child], cversion=1)
    mirror.apply_data(Q, child, data)
    mirror.apply_data(Q, child, None)
    assert "a" not in mirror.snapshot().queues


def test_learned_entities_show_until_a_later_listing_lacks_them() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, _ = _q("a")
    mirror.apply_bucket_listing(Q, bucket, [], cversion=0)
    mirror.learned(Q, child, Queue("a"))
    assert "a" in mirror.snapshot().queues
    # The listing that shows it: counted as someone else's create; already known, no read.
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=1) == []
    mirror.forget(Q, child)
    assert "a" not in mirror.snapshot().queues


def test_bindings_and_topic_keys_need_no_reads_and_dangling_bindings_are_hidden() -> None:
    mirror = NamespaceMirror("t/n")
    plain = Binding("q", "x", "k")
    with_args = Binding("q", "x", "", {"a": Field("b", 1)})
    children = [binding_id(plain), binding_id(with_args)]
    to_read: list[str] = []
    for child in children:
        to_read += mirror.apply_bucket_listing(Folder.BINDINGS, bucket_of(child), [child], 1)
    assert to_read == [binding_id(with_args)]
    mirror.apply_data(Folder.BINDINGS, binding_id(with_args), encode_binding(with_args))
    assert mirror.snapshot().bindings == frozenset()  # no queue, no exchange yet
    q, q_bucket, q_data = _q("q")
    mirror.apply_bucket_listing(Q, q_bucket, [q], 1)
    mirror.apply_data(Q, q, q_data)
    exchange = Exchange("x", ExchangeType.HEADERS)
    mirror.apply_bucket_listing(Folder.EXCHANGES, bucket_of("x"), ["x"], 1)
    mirror.apply_data(Folder.EXCHANGES, "x", encode_exchange(exchange))
    assert mirror.snapshot().bindings == {plain, with_args}
    key = "x,a.b"
    assert mirror.apply_bucket_listing(Folder.TOPIC_KEYS, bucket_of("x"), [key], 1) == []
    assert dict(mirror.snapshot().topic_keys) == {"x": frozenset({"a.b"})}


def test_exchange_bindings_need_no_reads_and_show_while_both_exchanges_do() -> None:
    mirror = NamespaceMirror("t/n")
    plain = ExchangeBinding("x", "y", "k")
    own = ExchangeBinding("x", "x", "")
    with_args = ExchangeBinding("x", "y", "", {"a": Field("b", 1)})
    folder = Folder.EXCHANGE_BINDINGS
    to_read: list[str] = []
    for binding in (plain, own, with_args):
        child = exchange_binding_id(binding)
        to_read += mirror.apply_bucket_listing(folder, bucket_of(child), [child], 1)
    assert to_read == [exchange_binding_id(with_args)]
    mirror.apply_data(folder, to_read[0], encode_exchange_binding(with_args))
    mirror.own_created(Folder.EXCHANGES, "x", Exchange("x", ExchangeType.HEADERS))
    assert mirror.snapshot().exchange_bindings == {own}
    mirror.own_created(Folder.EXCHANGES, "y", Exchange("y", ExchangeType.DIRECT))
    assert mirror.snapshot().exchange_bindings == {plain, own, with_args}
    mirror.own_deleted(Folder.EXCHANGES, "y")
    assert mirror.snapshot().exchange_bindings == {own}
    mirror.own_deleted(folder, exchange_binding_id(own))
    mirror.own_deleted(Folder.EXCHANGES, "x")
    assert mirror.snapshot().exchange_bindings == frozenset()


def test_foreign_children_are_ignored() -> None:
    mirror = NamespaceMirror("t/n")
    assert mirror.apply_bucket_listing(Folder.BINDINGS, "00", ["not-a-binding"], 1) == []
    assert mirror.apply_bucket_listing(Q, "00", ["broken"], 1) == ["broken"]
    mirror.apply_data(Q, "broken", b"not json")
    assert not mirror.snapshot().queues and not mirror.snapshot().bindings


def test_snapshots_are_built_once_per_version() -> None:
    mirror = NamespaceMirror("t/n")
    first = mirror.snapshot()
    assert mirror.snapshot() is first
    mirror.own_created(Q, "a", Queue("a"))
    second = mirror.snapshot()
    assert second is not first and second.version > first.version
    assert "a" not in first.queues


def test_a_vanished_bucket_takes_its_entities() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a")
    mirror.apply_bucket_listing(Q, bucket, [child], cversion=1)
    mirror.apply_data(Q, child, data)
    mirror.apply_folder_listing(Q, [])
    assert not mirror.snapshot().queues
    mirror.own_created(Q, child, Queue("a"))
    mirror.apply_missing_bucket(Q, bucket)
    assert not mirror.snapshot().queues


_QUEUES = [Queue(name) for name in "ab"] + [Queue("a", durable=True)]
_EXCHANGES = [Exchange(name, ExchangeType.DIRECT) for name in "xy"]
_BINDINGS = [
    Binding(q, e, "k", args)
    for q in "ab"
    for e in "xy"
    for args in ({}, {"d": Field("D", Decimal("1.5"))}, {"d": Field("D", Decimal("1.50"))})
]
_KEYS = [TopicKey(e, k) for e in "xy" for k in ("k1", "k2")]
_EDGES = [
    ExchangeBinding(s, d, "k", args)
    for s in "xy"
    for d in "xy"
    for args in ({}, {"a": Field("t", True)})
]
_ENTITIES: list[Entity] = [*_QUEUES, *_EXCHANGES, *_BINDINGS, *_KEYS, *_EDGES]


def _place(entity: Entity) -> tuple[Folder, str]:
    if isinstance(entity, Queue):
        return Folder.QUEUES, encode_name(entity.name)
    if isinstance(entity, Exchange):
        return Folder.EXCHANGES, encode_name(entity.name)
    if isinstance(entity, Binding):
        return Folder.BINDINGS, binding_id(entity)
    if isinstance(entity, ExchangeBinding):
        return Folder.EXCHANGE_BINDINGS, exchange_binding_id(entity)
    return Folder.TOPIC_KEYS, topic_key_child(*entity)


def _apply(mirror: NamespaceMirror, entity: Entity, action: str) -> None:
    """One change: c(reated), l(earned), d(eleted) by this replica, or f(orgotten)."""
    folder, child = _place(entity)
    if action == "c":
        mirror.own_created(folder, child, entity)
    elif action == "l":
        mirror.learned(folder, child, entity)
    elif action == "d":
        mirror.own_deleted(folder, child)
    else:
        mirror.forget(folder, child)


@given(st.lists(st.tuples(st.sampled_from(_ENTITIES), st.sampled_from("cdlf")), max_size=60))
def test_the_incremental_view_matches_a_rebuild(steps: list[tuple[Entity, str]]) -> None:
    """Whatever the order of changes, the maintained view equals one built from scratch."""
    mirror = NamespaceMirror("t/n")
    for entity, action in steps:
        _apply(mirror, entity, action)
        everything = [e for f in Folder for c in mirror.children(f) if (e := mirror.get(f, c))]
        expected = make_view(
            mirror.version,
            [e for e in everything if isinstance(e, Exchange)],
            [e for e in everything if isinstance(e, Queue)],
            [e for e in everything if isinstance(e, Binding)],
            [e for e in everything if isinstance(e, TopicKey)],
            exchange_bindings=[e for e in everything if isinstance(e, ExchangeBinding)],
        )
        assert mirror.snapshot() == expected


def test_persistent_watch_events_put_name_only_children_and_ask_for_the_others() -> None:
    mirror = NamespaceMirror("t/n")
    binding = Binding("q", "x", "k")
    b_child = binding_id(binding)
    q_child, q_bucket, q_data = _q("q")
    mirror.event_created(Folder.BINDINGS, bucket_of(b_child), b_child)
    mirror.event_created(Q, q_bucket, q_child)
    # Nothing is applied until the events that came together have all been seen.
    assert mirror.counts()[Folder.BINDINGS.value] == 0
    assert mirror.apply_created(Folder.BINDINGS, [b_child]) == set()
    assert mirror.counts()[Folder.BINDINGS.value] == 1
    assert mirror.apply_created(Q, [q_child]) == {q_child}
    assert mirror.apply_data(Q, q_child, q_data)
    assert "q" in mirror.snapshot().queues
    # A data change is read again only for a child that exists.
    assert mirror.present(Q, [q_child, "gone"]) == {q_child}
    mirror.event_deleted(Q, q_bucket, q_child)
    mirror.apply_deleted(Q, [q_child])
    assert "q" not in mirror.snapshot().queues
    assert mirror.present(Q, [q_child]) == set()
    # A read answered after the deletion event changes nothing.
    assert not mirror.apply_data(Q, q_child, q_data)


def test_a_child_created_and_deleted_before_it_was_applied_costs_nothing() -> None:
    mirror = NamespaceMirror("t/n")
    sentinel = "q,"  # created and deleted in one transaction (transactions.sentinel)
    bucket = bucket_of("q")
    mirror.event_created(Folder.DRAINS, bucket, sentinel)
    mirror.event_deleted(Folder.DRAINS, bucket, sentinel)
    version = mirror.version
    mirror.apply_deleted(Folder.DRAINS, [sentinel])
    assert mirror.apply_created(Folder.DRAINS, [sentinel]) == set()
    assert mirror.version == version


def test_a_child_deleted_and_created_again_is_replaced_never_missing() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a", owner="c1")
    mirror.event_created(Q, bucket, child)
    mirror.apply_created(Q, [child])
    mirror.apply_data(Q, child, data)
    mirror.event_deleted(Q, bucket, child)
    mirror.event_created(Q, bucket, child)
    mirror.apply_deleted(Q, [child])
    assert mirror.apply_created(Q, [child]) == {child}
    assert mirror.snapshot().queues["a"].owner == "c1"  # until the read answers
    mirror.apply_data(Q, child, _q("a", owner="c2")[2])
    assert mirror.snapshot().queues["a"].owner == "c2"


def test_a_line_record_replaced_create_first_is_never_missing_nor_twice() -> None:
    """lines.py replaces a consumer's record (waiting -> active -> waiting) by creating the new
    one, then deleting the old: applied one event at a time, each view shows it once."""
    mirror = NamespaceMirror("t/n")
    c = Folder.CONSUMERS
    waiting = LinePlace("q,r,1", "r", 7, 0, 5, active=False)
    records = [
        line_child("q", "r", 1, replace(waiting, active=flag)) for flag in (False, True, False)
    ]
    bucket = bucket_for(c, records[0])  # the queue's bucket
    mirror.event_created(c, bucket, records[0])
    mirror.apply_created(c, [records[0]])
    seen = [mirror.snapshot()]
    for old, new in itertools.pairwise(records):
        mirror.event_created(c, bucket, new)
        mirror.apply_created(c, [new])
        seen.append(mirror.snapshot())
        mirror.event_deleted(c, bucket, old)
        mirror.apply_deleted(c, [old])
        seen.append(mirror.snapshot())
    assert [[p.active for p in v.lines["q"]] for v in seen] == [
        [False],
        [True],
        [True],
        [False],
        [False],
    ]
    assert {v.consumers["q"] for v in seen} == {1}
    mirror.event_deleted(c, bucket, records[-1])
    mirror.apply_deleted(c, [records[-1]])
    assert "q" not in mirror.snapshot().lines and "q" not in mirror.snapshot().consumers


def test_events_are_accounted_for_by_the_next_listing() -> None:
    mirror = NamespaceMirror("t/n")
    child, bucket, data = _q("a")
    mirror.apply_bucket_listing(Q, bucket, [], cversion=0)
    mirror.event_created(Q, bucket, child)
    mirror.apply_created(Q, [child])
    mirror.apply_data(Q, child, data)
    # Our own create whose event was held back: counted once, by the answer.
    mine, mine_bucket, _ = _q("b")
    mirror.apply_bucket_listing(Q, mine_bucket, [], cversion=0)
    mirror.own_created(Q, mine, Queue("b"))
    assert mirror.apply_bucket_listing(Q, bucket, [child], cversion=1) == []
    assert mirror.apply_bucket_listing(Q, mine_bucket, [mine], cversion=1) == []
    # Our own delete, whose event came first: counted once too.
    mirror.event_deleted(Q, mine_bucket, mine)
    mirror.own_deleted(Q, mine)
    assert mirror.apply_bucket_listing(Q, mine_bucket, [], cversion=2) == []


@given(
    st.lists(st.tuples(st.sampled_from(_ENTITIES), st.sampled_from("cdlf")), max_size=60),
    st.integers(0, 60),
)
def test_the_index_built_at_the_end_of_a_load_matches_one_kept_change_by_change(
    steps: list[tuple[Entity, str]], first_view: int
) -> None:
    """A mirror indexes nothing until its first snapshot (the end of a first load), then
    builds the index in one go (_Index.load); from then on change by change. Wherever the
    first snapshot falls, the views are those of a mirror that indexed every change."""
    deferred = NamespaceMirror("t/n")
    eager = NamespaceMirror("t/n")
    eager.snapshot()
    for index, (entity, action) in enumerate(steps):
        if index == first_view:
            deferred.snapshot()
        for mirror in (deferred, eager):
            _apply(mirror, entity, action)
        if index >= first_view:
            assert deferred.snapshot() == eager.snapshot()
    assert deferred.snapshot() == eager.snapshot()
