"""What the gateway reads from Pulsar's admin statistics (gateway/pulsar/admin_stats.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.pulsar.admin_stats import BacklogAnalysis


def test_a_finished_scan_counts_every_message() -> None:
    analysis = BacklogAnalysis.from_json({"entries": 400, "messages": 4000, "aborted": False})
    assert analysis.messages_in(400) == 4000


def test_an_aborted_scan_extrapolates_past_the_scan_limit() -> None:
    # The broker stops at subscriptionBacklogScanMaxEntries (10,000 by default).
    unbatched = BacklogAnalysis.from_json({"entries": 10000, "messages": 10000, "aborted": True})
    assert unbatched.messages_in(50000) == 50000
    batched = BacklogAnalysis.from_json({"entries": 10000, "messages": 40000, "aborted": True})
    assert batched.messages_in(12500) == 50000


def test_an_answer_without_the_aborted_field_is_a_finished_scan() -> None:
    assert BacklogAnalysis.from_json({"entries": 3, "messages": 5}).messages_in(100) == 5


@given(
    entries=st.integers(min_value=0, max_value=10**6),
    per_entry=st.integers(min_value=1, max_value=100),
    unscanned=st.integers(min_value=0, max_value=10**6),
)
def test_the_estimate_never_falls_below_what_was_counted(
    entries: int, per_entry: int, unscanned: int
) -> None:
    analysis = BacklogAnalysis(entries=entries, messages=entries * per_entry, aborted=True)
    estimate = analysis.messages_in(entries + unscanned)
    assert estimate >= analysis.messages
    assert estimate == (entries + unscanned) * per_entry or entries == 0
