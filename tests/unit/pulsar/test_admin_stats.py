"""What the gateway reads from Pulsar's admin statistics (gateway/pulsar/admin_stats.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.pulsar.admin_stats import BacklogAnalysis, CursorState


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


# ----------------------------------------------------------------------- a cursor's acks


def test_cursor_state_reads_pulsars_internal_stats() -> None:
    # As Pulsar 4.0.8 answered after acks of entries 1, 2 and 4 of ledger 22150 (0..5).
    cursor = CursorState.from_json(
        {
            "markDeletePosition": "22150:-1",
            "individuallyDeletedMessages": "[(22150:0..22150:2],(22150:3..22150:4]]",
        }
    )
    assert [e for e in range(6) if cursor.acknowledged((22150, e))] == [1, 2, 4]
    assert cursor.acknowledged((22149, 7))  # an older ledger: before the mark-delete
    caught_up = CursorState.from_json(
        {"markDeletePosition": "22150:2", "individuallyDeletedMessages": "[]"}
    )
    assert [e for e in range(6) if caught_up.acknowledged((22150, e))] == [0, 1, 2]


@given(
    st.sets(st.integers(0, 40)),
    st.integers(-1, 40),
)
def test_cursor_state_matches_the_acked_set(acked: set[int], mark: int) -> None:
    # Every entry up to the mark plus ``acked`` after it, written as Pulsar writes ranges.
    runs: list[list[int]] = []  # consecutive acked entries after the mark
    for entry in sorted(e for e in acked if e > mark):
        if runs and runs[-1][1] == entry - 1:
            runs[-1][1] = entry
        else:
            runs.append([entry, entry])
    ranges = [f"(7:{first - 1}..7:{last}]" for first, last in runs]
    cursor = CursorState.from_json(
        {"markDeletePosition": f"7:{mark}", "individuallyDeletedMessages": f"[{','.join(ranges)}]"}
    )
    expected = {e for e in range(42) if e <= mark or e in acked}
    assert {e for e in range(42) if cursor.acknowledged((7, e))} == expected
