"""Consumer priorities and single active consumer: RabbitMQ's rules (model/consumers.py).

The election is checked against transcriptions of RabbitMQ's own code, driven by Hypothesis
through any sequence of consumers registering (with priorities and prefetches), leaving,
taking and settling messages:

- classic queues, ``rabbit_amqqueue_process`` (``basic_consume``, ``stop_consumer``,
  ``handle_ch_down``) over ``rabbit_queue_consumers:get_consumer`` (a priority queue: highest
  priority first, first in first out within one);
- quorum queues, ``rabbit_fifo:activate_next_consumer`` with its waiting list ordered by
  ``sort_waiting`` (priority, then credit, then key) and the ``quiescing`` state.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.amqp.errors import ReplyCode
from gateway.amqp.fieldtable import Field
from gateway.model.consumers import (
    UNLIMITED_CREDIT,
    LinePlace,
    consumer_credit,
    consumer_priority,
    preempting,
    refuse_exclusive,
    refuse_get,
    single_active,
    successor,
)

WHERE = "queue 'q' in vhost '/'"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, False),
        ({"x-single-active-consumer": Field("t", True)}, True),
        ({"x-single-active-consumer": Field("t", False)}, False),
        ({"x-single-active-consumer": Field("S", "true")}, False),  # refused at declare
    ],
)
def test_single_active(arguments: dict[str, Field], expected: bool) -> None:
    assert single_active(arguments) is expected


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, 0),
        ({"x-priority": Field("I", 10)}, 10),
        ({"x-priority": Field("b", -3)}, -3),
        ({"x-priority": Field("l", 2**40)}, 2**40),
        ({"x-priority": Field("S", "10")}, 0),  # refused at consume
    ],
)
def test_consumer_priority(arguments: dict[str, Field], expected: int) -> None:
    assert consumer_priority(arguments) == expected


def test_consumer_credit() -> None:
    assert consumer_credit(0) == UNLIMITED_CREDIT == 2000
    assert consumer_credit(7) == 7


def test_refusals_in_rabbitmqs_words() -> None:
    exclusive = refuse_exclusive(WHERE)
    assert exclusive.reply_code == ReplyCode.ACCESS_REFUSED
    assert exclusive.reply_text == f"ACCESS_REFUSED - {WHERE} in exclusive use"
    get = refuse_get(WHERE)
    assert get.reply_code == ReplyCode.RESOURCE_LOCKED
    assert get.reply_text == (
        f"RESOURCE_LOCKED - cannot obtain access to locked {WHERE}. basic.get operations are "
        'not supported by <<"quorum">> queues with single active consumer'
    )


def place(sequence: int, priority: int = 0, credit: int = 10, active: bool = False) -> LinePlace:
    return LinePlace(str(sequence), "r", sequence, priority, credit, active)


def test_successor_and_preemption_by_queue_type() -> None:
    line = [place(1, 0, 5), place(2, 3, 1), place(3, 3, 9)]
    assert successor(line, "classic") == line[1]  # priority, then registration
    assert successor(line, "quorum") == line[2]  # priority, then credit
    assert successor([], "classic") is None
    active = [replace(line[0], active=True), *line[1:]]
    assert successor(active, "classic") is None  # one is active already
    assert preempting(active, "classic") is None  # never on classic queues
    assert preempting(active, "quorum") == line[2]
    assert preempting([replace(line[2], active=True), line[0]], "quorum") is None


# ---------------------------------------------------------------------- against RabbitMQ


@dataclass
class Consumer:
    key: int  # registration order
    priority: int
    credit: int
    held: int = 0  # deliveries not settled


@dataclass
class ClassicReference:
    """rabbit_amqqueue_process with single_active_consumer_on = true (no blocked consumers:
    waiting ones never get messages)."""

    consumers: list[Consumer] = field(default_factory=list)
    active: Consumer | None = None

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        if self.active is None:  # basic_consume: Holder none -> the new consumer
            self.active = consumer

    def remove(self, key: int) -> None:
        self.consumers = [c for c in self.consumers if c.key != key]
        if self.active is not None and self.active.key == key:
            # get_consumer: priority_queue:out_p, highest priority, FIFO within.
            ranked = sorted(self.consumers, key=lambda c: (-c.priority, c.key))
            self.active = ranked[0] if ranked else None

    def settle(self) -> None:
        if self.active is not None and self.active.held:
            self.active.held -= 1

    def deliver(self) -> None:
        if self.active is not None:
            self.active.held += 1


@dataclass
class QuorumReference:
    """rabbit_fifo's single_active strategy: ``consumers`` holds the active one (up or
    quiescing), ``waiting`` the others, sorted as sort_waiting does."""

    active: Consumer | None = None
    quiescing: bool = False
    waiting: list[Consumer] = field(default_factory=list)

    def _sort(self) -> None:
        self.waiting.sort(key=lambda c: (-c.priority, -c.credit, c.key))

    def _activate_next(self) -> None:
        if not self.waiting:
            return
        head = self.waiting[0]
        if self.active is None:
            self.waiting.pop(0)
            self.active, self.quiescing = head, False
        elif head.priority > self.active.priority:
            if self.active.held == 0:
                self.waiting.pop(0)
                self.waiting.append(self.active)
                self._sort()
                self.active, self.quiescing = head, False
            else:
                self.quiescing = True

    def add(self, consumer: Consumer) -> None:
        self.waiting.append(consumer)
        self._sort()
        self._activate_next()

    def remove(self, key: int) -> None:
        self.waiting = [c for c in self.waiting if c.key != key]
        if self.active is not None and self.active.key == key:
            self.active, self.quiescing = None, False
        self._activate_next()

    def settle(self) -> None:
        active = self.active
        if active is not None and active.held:
            active.held -= 1
            if self.quiescing and active.held == 0:  # update_or_remove_con, quiescing
                self.active, self.quiescing = None, False
                self.waiting.append(active)
                self._sort()
            self._activate_next()

    def deliver(self) -> None:
        if self.active is not None and not self.quiescing:
            self.active.held += 1


@dataclass
class Line:
    """The gateway's rules applied as both backends apply them: after every change the
    active one starts stepping down if ``preempting`` says so (and goes on once it started,
    as rabbit_fifo's ``quiescing`` does), steps down once it holds nothing, and
    ``successor`` picks the next (memory.py's ``rearrange``, single_active.py's turn)."""

    kind: str
    consumers: list[Consumer] = field(default_factory=list)
    active: Consumer | None = None
    quiescing: bool = False

    def _places(self) -> list[LinePlace]:
        return [
            LinePlace(str(c.key), "r", c.key, c.priority, c.credit, c is self.active)
            for c in self.consumers
        ]

    def _by_place(self, chosen: LinePlace | None) -> Consumer | None:
        return next((c for c in self.consumers if chosen and c.key == chosen.sequence), None)

    def stepping_down(self) -> bool:
        return self.quiescing

    def rearrange(self) -> None:
        if self.active is not None and preempting(self._places(), self.kind) is not None:
            self.quiescing = True
        if self.active is not None and self.quiescing and not self.active.held:
            self.active, self.quiescing = None, False
        if self.active is None:
            self.active = self._by_place(successor(self._places(), self.kind))

    def add(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.rearrange()

    def remove(self, key: int) -> None:
        self.consumers = [c for c in self.consumers if c.key != key]
        if self.active is not None and self.active.key == key:
            self.active, self.quiescing = None, False
        self.rearrange()

    def settle(self) -> None:
        if self.active is not None and self.active.held:
            self.active.held -= 1
        self.rearrange()

    def deliver(self) -> None:
        if self.active is not None and not self.stepping_down():
            self.active.held += 1


events = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(-2, 2), st.sampled_from([1, 5, 2000])),
        st.tuples(st.just("remove"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("deliver"), st.just(0), st.just(0)),
        st.tuples(st.just("settle"), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=1000)
@given(events, st.sampled_from(["classic", "quorum"]))
def test_the_active_consumer_is_rabbitmqs(script: list[tuple[str, int, int]], kind: str) -> None:
    ours = Line(kind)
    reference: ClassicReference | QuorumReference = (
        ClassicReference() if kind == "classic" else QuorumReference()
    )
    keys = 0
    for action, number, credit in script:
        if action == "add":
            keys += 1
            ours.add(Consumer(keys, number, credit))
            reference.add(Consumer(keys, number, credit))
        elif action == "remove":
            present = [c.key for c in ours.consumers]
            if present:
                key = present[number % len(present)]
                ours.remove(key)
                reference.remove(key)
        elif action == "deliver":
            ours.deliver()
            reference.deliver()
        else:
            ours.settle()
            reference.settle()
        expected = None if reference.active is None else reference.active.key
        assert (None if ours.active is None else ours.active.key) == expected
        if isinstance(reference, QuorumReference) and reference.active is not None:
            assert ours.stepping_down() == reference.quiescing
