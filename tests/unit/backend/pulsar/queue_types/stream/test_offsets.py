"""Stream offsets: Pulsar message ids packed into longs, in the same order (Hypothesis)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.backend.pulsar.queue_types.stream.offsets import (
    entry_start,
    exact_offset,
    message_id_of,
    offset_of,
)
from gateway.pulsar.ids import MessageId

ids = st.builds(
    MessageId,
    st.integers(min_value=0, max_value=2**32 - 1),
    st.integers(min_value=0, max_value=2**20 - 1),
    st.integers(min_value=-1, max_value=2**11 - 1),
)


@given(ids, ids)
def test_offsets_keep_the_order_of_message_ids(a: MessageId, b: MessageId) -> None:
    # A non-batched message (index -1) sorts as the first of its entry.
    key_a = (a.ledger_id, a.entry_id, max(a.batch_index, 0))
    key_b = (b.ledger_id, b.entry_id, max(b.batch_index, 0))
    assert (offset_of(a) < offset_of(b)) == (key_a < key_b)
    assert (offset_of(a) == offset_of(b)) == (key_a == key_b)
    assert 0 <= offset_of(a) < 2**63


@given(ids)
def test_an_offset_leads_back_to_its_message(found: MessageId) -> None:
    back = message_id_of(offset_of(found))
    assert (back.ledger_id, back.entry_id) == (found.ledger_id, found.entry_id)
    assert max(back.batch_index, 0) == max(found.batch_index, 0)
    start = entry_start(offset_of(found))
    assert start == MessageId(found.ledger_id, found.entry_id)


@given(ids)
def test_resuming_after_a_message_starts_in_its_entry_and_skips_it(found: MessageId) -> None:
    resume = offset_of(found) + 1
    assert resume > offset_of(found)
    start = entry_start(resume)
    # The reader starts at the same entry (whose messages below ``resume`` are skipped) or,
    # past the entry's last possible batch index, at the next entry.
    assert (start.ledger_id, start.entry_id) >= (found.ledger_id, found.entry_id)


def test_beyond_the_limits_offsets_stay_within_their_ledger() -> None:
    big = offset_of(MessageId(5, 2**21, 0))
    assert offset_of(MessageId(5, 2**20 - 1, 2**11 - 1)) == big
    assert big < offset_of(MessageId(6, 0))


any_ids = st.builds(
    MessageId,
    st.integers(min_value=0, max_value=2**40),
    st.integers(min_value=0, max_value=2**24),
    st.integers(min_value=-1, max_value=2**13),
)


@given(any_ids, any_ids)
def test_exact_offsets_name_one_message_each(a: MessageId, b: MessageId) -> None:
    # What the feed's copies are deduplicated by: an offset given to one message only, or none.
    exact_a, exact_b = exact_offset(a), exact_offset(b)
    if exact_a is not None and exact_b is not None:
        key_a = (a.ledger_id, a.entry_id, max(a.batch_index, 0))
        key_b = (b.ledger_id, b.entry_id, max(b.batch_index, 0))
        assert (exact_a == exact_b) == (key_a == key_b)
        assert (exact_a < exact_b) == (key_a < key_b)
    for found, exact in ((a, exact_a), (b, exact_b)):
        fits = found.ledger_id < 2**32 and found.entry_id < 2**20 and found.batch_index < 2**11
        assert (exact is not None) == fits
        assert exact is None or exact == offset_of(found)
