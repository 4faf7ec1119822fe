"""RabbitMQ's priority queue rules (``rabbit_priority_queue``) and the ordering structure."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.amqp.fieldtable import Field
from gateway.model.priority import (
    MAX_SUPPORTED_PRIORITY,
    PriorityBuffer,
    effective_priority,
    max_priority,
)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, None),
        ({"x-max-priority": Field("b", 10)}, 10),
        ({"x-max-priority": Field("B", 255)}, 255),
        ({"x-max-priority": Field("I", 0)}, 0),
        ({"x-max-priority": Field("l", 3)}, 3),
        # rabbit_priority_queue:priorities: other types make no priority queue (validation
        # refuses them first), and the maximum is capped at MAX_SUPPORTED_PRIORITY.
        ({"x-max-priority": Field("S", "10")}, None),
        ({"x-max-priority": Field("d", 10.0)}, None),
        ({"x-max-priority": Field("l", 1000)}, MAX_SUPPORTED_PRIORITY),
        ({"x-message-ttl": Field("I", 10)}, None),
    ],
)
def test_max_priority(arguments: dict[str, Field], expected: int | None) -> None:
    assert max_priority(arguments) == expected


@pytest.mark.parametrize(
    ("priority", "maximum", "expected"),
    [
        (None, 10, 0),  # no priority property: 0
        (0, 10, 0),
        (7, 10, 7),
        (10, 10, 10),
        (11, 10, 10),  # above the maximum: the maximum
        (255, 3, 3),
        (5, 0, 0),
    ],
)
def test_effective_priority(priority: int | None, maximum: int, expected: int) -> None:
    assert effective_priority(priority, maximum) == expected


def test_highest_first_then_fifo() -> None:
    buffer: PriorityBuffer[str] = PriorityBuffer()
    for name, priority in [("a", 1), ("b", 3), ("c", 2), ("d", 3), ("e", 0), ("f", 1)]:
        buffer.push(name, priority)
    assert list(buffer) == ["b", "d", "c", "a", "f", "e"]
    assert buffer.peek() == "b"
    assert [buffer.pop() for _ in range(len(buffer))] == ["b", "d", "c", "a", "f", "e"]
    assert not buffer
    with pytest.raises(IndexError):
        buffer.pop()
    with pytest.raises(IndexError):
        buffer.peek()


def test_requeued_items_go_back_to_their_places() -> None:
    buffer: PriorityBuffer[str] = PriorityBuffer()
    for name, priority in [("a", 1), ("b", 1), ("c", 5), ("d", 1)]:
        buffer.push(name, priority)
    assert buffer.pop_entry()[1] == "c"
    first, second = buffer.pop_entry(), buffer.pop_entry()
    assert (first[1], second[1]) == ("a", "b")
    buffer.push("e", 1)
    # Requeued in the reverse order (a nack of several, a recover), they still come back
    # in their first order, ahead of what arrived after them.
    buffer.restore(second[1], 1, second[0])
    buffer.restore(first[1], 1, first[0])
    assert list(buffer) == ["a", "b", "d", "e"]
    buffer.push_front("z", 1)
    assert buffer.pop() == "z"


def test_keep_removes_in_delivery_order_and_keeps_the_rest_in_order() -> None:
    buffer: PriorityBuffer[int] = PriorityBuffer()
    for n in range(10):
        buffer.push(n, n % 3)
    removed = buffer.keep(lambda n: n % 2 == 0)
    assert removed == [5, 1, 7, 3, 9]
    assert list(buffer) == [2, 8, 4, 0, 6]
    assert len(buffer) == 5
    buffer.clear()
    assert len(buffer) == 0 and list(buffer) == []


# One operation on the buffer: ("push", priority), ("front", priority), ("pop",),
# ("restore", n) (the n-th item popped and not restored yet goes back), ("keep", m).
operations = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 5)),
        st.tuples(st.just("front"), st.integers(0, 5)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("restore"), st.integers(0, 10)),
        st.tuples(st.just("keep"), st.integers(2, 4)),
    ),
    max_size=80,
)


@given(operations)
def test_any_interleaving_keeps_priority_order_and_loses_nothing(
    steps: list[tuple[object, ...]],
) -> None:
    """Against a model: each item has (priority, place); a push takes the next place at the
    back, a push_front the next place at the front, a restore the place it had; pop returns
    the highest priority and, within it, the smallest place. Nothing is lost or duplicated."""
    buffer: PriorityBuffer[int] = PriorityBuffer()
    model: dict[int, tuple[int, int]] = {}  # item -> (priority, place)
    out: dict[int, tuple[int, int]] = {}  # popped, not restored: item -> (priority, place)
    items = itertools.count()
    back, front = itertools.count(), itertools.count(-1, -1)

    def order(item: int) -> tuple[int, int]:
        return (-model[item][0], model[item][1])

    for step in steps:
        match step:
            case ("push", int(priority)):
                item = next(items)
                place = next(back)
                assert buffer.push(item, priority) == place
                model[item] = (priority, place)
            case ("front", int(priority)):
                item = next(items)
                place = next(front)
                assert buffer.push_front(item, priority) == place
                model[item] = (priority, place)
            case ("pop",):
                if not model:
                    with pytest.raises(IndexError):
                        buffer.pop()
                    continue
                expected = min(model, key=order)
                assert buffer.peek() == expected
                place, got = buffer.pop_entry()
                assert (got, place) == (expected, model[expected][1])
                out[got] = model.pop(got)
            case ("restore", int(n)):
                if not out:
                    continue
                item = sorted(out)[n % len(out)]
                priority, place = out.pop(item)
                buffer.restore(item, priority, place)
                model[item] = (priority, place)
            case ("keep", int(modulus)):
                removed = buffer.keep(lambda i, m=modulus: i % m != 0)
                assert removed == sorted((i for i in model if i % modulus == 0), key=order)
                for item in removed:
                    del model[item]
        assert len(buffer) == len(model)
        assert list(buffer) == sorted(model, key=order)
        assert not set(model) & set(out)
