"""OwnWrites: events for our transactions in flight are held, then dropped or replayed."""

from __future__ import annotations

from gateway.metadata.own_writes import OwnWrites


def test_events_for_paths_not_in_flight_are_not_held() -> None:
    own = OwnWrites()
    assert not own.hold("/a", lambda: None)


def test_events_held_for_a_successful_write_are_dropped() -> None:
    own = OwnWrites()
    replayed: list[str] = []
    own.begin(["/a", "/b"])
    assert own.hold("/a", lambda: replayed.append("a"))
    own.end(["/a", "/b"], failed=False)
    assert replayed == [] and len(own) == 0
    assert not own.hold("/a", lambda: None)


def test_events_held_for_a_failed_write_are_replayed_in_order() -> None:
    own = OwnWrites()
    replayed: list[int] = []
    own.begin(["/a"])
    own.hold("/a", lambda: replayed.append(1))
    own.hold("/a", lambda: replayed.append(2))
    own.end(["/a"], failed=True)
    assert replayed == [1, 2]


def test_two_writes_on_one_path_release_it_when_both_are_answered() -> None:
    own = OwnWrites()
    replayed: list[int] = []
    own.begin(["/a"])
    own.begin(["/a"])
    own.hold("/a", lambda: replayed.append(1))
    own.end(["/a"], failed=True)  # one failed: the held events may be someone else's
    assert replayed == [] and own.hold("/a", lambda: replayed.append(2))
    own.end(["/a"], failed=False)
    assert replayed == [1, 2] and len(own) == 0


def test_clear_forgets_everything_and_late_answers_are_harmless() -> None:
    own = OwnWrites()
    replayed: list[int] = []
    own.begin(["/a"])
    own.hold("/a", lambda: replayed.append(1))
    own.clear()
    own.end(["/a"], failed=True)  # the answer to a write sent before the disconnect
    assert replayed == [] and len(own) == 0
