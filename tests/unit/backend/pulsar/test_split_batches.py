"""Which messages read ahead a closing consumer moves so that a batch is not sent again."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.backend.pulsar.split_batches import moved_in_order, rests_of_split_entries
from gateway.pulsar.ids import BatchPosition


def at(entry: int, index: int, size: int, topic: str = "t") -> tuple[str, BatchPosition]:
    return topic, BatchPosition((1, entry, -1), index, size)


def test_the_rest_of_a_batch_part_of_which_was_taken_is_moved() -> None:
    # Entry 0: m0 and m1 taken, m2..m4 here. Entry 1: all here (comes back whole).
    # Entry 2: m0 taken, m1 here, m2 still in pulsar-client's queue (comes back anyway).
    unreceived = [at(0, 2, 5), at(0, 3, 5), at(0, 4, 5), at(1, 0, 2), at(1, 1, 2), at(2, 1, 3)]
    assert rests_of_split_entries(unreceived) == [0, 1, 2]


def test_messages_of_their_own_and_batches_of_one_are_left() -> None:
    own = ("t", BatchPosition((1, 7, -1), -1, 0))
    assert rests_of_split_entries([own, at(3, 0, 1)]) == []


def test_a_gap_is_a_taken_message_and_topics_are_told_apart() -> None:
    # A priority consumer takes out of order: index 1 taken, 0 and 2 left.
    assert rests_of_split_entries([at(0, 0, 3), at(0, 2, 3)]) == [0, 1]
    # The same entry position on two topics is two entries: one split, one whole here.
    unreceived = [at(0, 1, 2, "a"), at(0, 0, 2, "b"), at(0, 1, 2, "b")]
    assert rests_of_split_entries(unreceived) == [0]


@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=5
    )
)
def test_an_entry_is_moved_exactly_when_it_was_split_and_its_rest_is_here(
    entries: list[tuple[int, int, int]],
) -> None:
    """Each entry: ``size`` messages arrived in order; the first ``taken`` were taken, the next
    ``held`` are here, and the rest is still in pulsar-client (not here)."""
    unreceived = []
    expected = []
    for number, (size, taken, held) in enumerate(entries):
        taken = min(taken, size)
        here = range(taken, min(size, taken + held))
        for index in here:
            unreceived.append(at(number, index, size))
        if size > 1 and taken > 0 and here and here[-1] == size - 1:
            expected.extend(range(len(unreceived) - len(here), len(unreceived)))
    assert rests_of_split_entries(unreceived) == expected


def test_what_was_read_after_a_moved_message_is_moved_with_it_in_topic_order() -> None:
    # A priority consumer's buffer: out of topic order. Entry 1 was split (index 0 taken);
    # entry 0 (before it) comes back in its place; entries 1 and 2 and the message of its own
    # after them move, in topic order; topic "b" had nothing split.
    unreceived = [at(2, 0, 2), at(1, 2, 3), at(0, 0, 2), at(1, 1, 3), at(2, 1, 2)]
    unreceived += [("t", BatchPosition((1, 3, -1), -1, 0)), at(0, 0, 2, "b"), at(0, 1, 2, "b")]
    assert moved_in_order(unreceived) == [3, 1, 0, 4, 5]


@given(
    st.lists(
        st.tuples(st.sampled_from("ab"), st.integers(0, 4), st.integers(0, 3), st.integers(2, 4)),
        max_size=12,
    )
)
def test_moved_in_order_keeps_the_rests_and_the_topic_order(
    messages: list[tuple[str, int, int, int]],
) -> None:
    unreceived = [
        at(entry, min(index, size - 1), size, topic) for topic, entry, index, size in messages
    ]
    moved = moved_in_order(unreceived)
    assert set(rests_of_split_entries(unreceived)) <= set(moved)
    assert len(set(moved)) == len(moved)
    for topic in "ab":
        places = [
            (unreceived[n][1].entry, unreceived[n][1].batch_index)
            for n in moved
            if unreceived[n][0] == topic
        ]
        assert places == sorted(places)
        if places:  # everything of the topic from the first moved one on
            after = [
                n
                for n, (t, p) in enumerate(unreceived)
                if t == topic and (p.entry, p.batch_index) >= places[0]
            ]
            assert set(after) <= set(moved)


def test_an_entry_whose_last_message_was_taken_is_moved_too() -> None:
    # A priority consumer took the last message of entry 0 (a Basic.Get of the highest
    # priority) and read the rest: all of it came, and is moved; entry 1, whose last message
    # is still in pulsar-client, is not.
    unreceived = [at(0, 0, 3), at(0, 1, 3), at(1, 0, 3)]
    assert rests_of_split_entries(unreceived) == []
    assert rests_of_split_entries(unreceived, {"t": at(0, 2, 3)[1]}) == [0, 1]
    # Taken further along (a later entry): every message of entry 0 came before it.
    assert rests_of_split_entries(unreceived[:2], {"t": at(4, 0, 1)[1]}) == [0, 1]
    # Another topic's taken message says nothing of this one.
    assert rests_of_split_entries(unreceived, {"u": at(0, 2, 3)[1]}) == []
