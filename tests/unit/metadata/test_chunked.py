"""ChunkedDict: a dict whose snapshots stay as they were while the live map changes."""

from __future__ import annotations

from collections.abc import Iterator
from unittest.mock import patch

from hypothesis import given
from hypothesis import strategies as st

from gateway.metadata.chunked import ChunkedDict, FrozenChunkedMap, FrozenChunkedSet, Picked

_OPS = st.lists(
    st.tuples(st.sampled_from(["set", "del", "snap"]), st.integers(0, 3000), st.integers()),
    max_size=200,
)


def _replay(
    live: ChunkedDict[str, int], model: dict[str, int], ops: list[tuple[str, int, int]]
) -> list[tuple[FrozenChunkedMap[str, int], FrozenChunkedSet[str], dict[str, int]]]:
    """Apply ``ops`` to the map and to a dict alike, checking them against each other;
    returns the snapshots taken ("snap"), map and keys, with what each must hold."""
    snapshots = []
    for op, key_number, value in ops:
        key = f"k{key_number}"
        if op == "set":
            live[key] = value
            model[key] = value
        elif op == "del":
            assert live.pop(key, None) == model.pop(key, None)
        else:
            snapshots.append((live.frozen(), live.frozen_keys(), dict(model)))
        assert len(live) == len(model)
        assert (key in live) == (key in model)
        assert live.get(key) == model.get(key)
    return snapshots


@given(_OPS)
def test_behaves_as_a_dict_and_snapshots_never_change(ops: list[tuple[str, int, int]]) -> None:
    live: ChunkedDict[str, int] = ChunkedDict()
    model: dict[str, int] = {}
    for frozen, keys, expected in _replay(live, model, ops):
        assert dict(frozen) == expected
        assert len(frozen) == len(expected) and len(keys) == len(expected)
        assert set(keys) == set(expected) and keys == frozenset(expected)
        for key, value in expected.items():
            assert frozen[key] == value and frozen.get(key) == value and key in keys
        assert frozen.get("absent") is None and "absent" not in frozen


def test_set_operations_on_frozen_keys_give_frozensets() -> None:
    live: ChunkedDict[str, int] = ChunkedDict()
    live["a"] = 1
    live["b"] = 2
    keys = live.frozen_keys()
    assert keys - {"a"} == frozenset({"b"})
    assert isinstance(keys | {"c"}, frozenset)
    del live["a"]
    assert "a" in keys and "a" not in live


@given(st.dictionaries(st.integers(0, 3000).map(lambda n: f"k{n}"), st.integers()), _OPS)
def test_a_map_started_from_a_base_behaves_as_a_dict_and_leaves_the_base_alone(
    base: dict[str, int], ops: list[tuple[str, int, int]]
) -> None:
    original = dict(base)
    live: ChunkedDict[str, int] = ChunkedDict(base)
    model = dict(base)
    snapshots = [(live.frozen(), live.frozen_keys(), dict(model)), *_replay(live, model, ops)]
    assert dict(live.frozen()) == model and sorted(live) == sorted(model)
    for frozen, keys, expected in snapshots:
        assert set(keys) == set(expected)
        assert sorted(frozen.items()) == sorted(expected.items())
        assert sorted(frozen.values()) == sorted(expected.values())
        assert dict(frozen) == expected and len(frozen) == len(expected)
    assert base == original


def _snapshots(
    ops: list[tuple[str, int, int]], base: dict[str, int] | None = None
) -> Iterator[FrozenChunkedMap[str, int]]:
    """Apply ``ops`` to a live map (started from ``base``), giving a snapshot at the start
    when there is a base, at each "snap" and at the end."""
    live: ChunkedDict[str, int] = ChunkedDict(base)
    if base is not None:
        yield live.frozen()
    for op, key_number, value in [*ops, ("snap", 0, 0)]:
        key = f"k{key_number}"
        if op == "set":
            live[key] = value
        elif op == "del":
            live.pop(key, None)
        else:
            yield live.frozen()


@given(_OPS)
def test_consecutive_snapshots_share_exactly_the_chunks_that_did_not_change(
    ops: list[tuple[str, int, int]],
) -> None:
    before = ChunkedDict[str, int]().frozen()
    for after in _snapshots(ops):
        changed = {k for k in set(dict(before)) | set(dict(after)) if before.get(k) != after.get(k)}
        shared = [
            i for i, (o, n) in enumerate(zip(before.chunks, after.chunks, strict=True)) if o is n
        ]
        for index in shared:
            assert dict(before.chunks[index]) == dict(after.chunks[index])
            assert not changed & set(after.chunks[index]) and not changed & set(
                before.chunks[index]
            )
        before = after


@given(_OPS)
def test_picked_follows_snapshots_as_a_look_at_every_entry_would(
    ops: list[tuple[str, int, int]],
) -> None:
    looked: list[int] = []

    def even(value: int) -> int | None:
        looked.append(value)
        return value * 10 if value % 2 == 0 else None

    picked: Picked[str, int, int] = Picked(even)
    for snapshot in _snapshots(ops):
        looked.clear()
        found = picked(snapshot)
        assert dict(found) == {k: v * 10 for k, v in snapshot.items() if v % 2 == 0}
        assert len(looked) <= len(snapshot)
        looked.clear()
        assert picked(snapshot) is found and looked == []  # the same snapshot: no look


def _picked_over_5000() -> tuple[ChunkedDict[str, int], Picked[str, int, int], list[int]]:
    """A map of 5,000 entries, a picker that has seen it (truthy values) and the values it
    looks at from now on."""
    live: ChunkedDict[str, int] = ChunkedDict()
    for n in range(5000):
        live[f"k{n}"] = n
    looked: list[int] = []

    def truthy(value: int) -> int | None:
        looked.append(value)
        return value or None

    picked: Picked[str, int, int] = Picked(truthy)
    picked(live.frozen())
    assert len(looked) == 5000
    looked.clear()
    return live, picked, looked


def test_picked_looks_only_at_the_keys_that_changed() -> None:
    live, picked, looked = _picked_over_5000()
    live["k7"] = -7
    live["k8"] = 0
    live["k7"] = -8
    del live["k9"]
    found = picked(live.frozen())
    assert found["k7"] == -8 and "k8" not in found and "k9" not in found and found["k10"] == 10
    assert sorted(looked) == [-8, 0]  # k7 once (its latest value) and k8; k9 is gone
    assert dict(picked({"a": 1, "b": 0})) == {"a": 1}  # a plain mapping: looked at whole


def test_picked_looks_at_the_chunks_that_changed_once_the_log_started_anew() -> None:
    live, picked, looked = _picked_over_5000()
    with patch("gateway.metadata.chunked.CHANGE_LOG_LIMIT", 2):
        for value in (-1, -2, -3):
            live["k7"] = value
    assert picked(live.frozen())["k7"] == -3
    assert 1 <= len(looked) < 50  # one chunk of 1,024


def test_changed_since_names_the_keys_between_two_snapshots_of_one_map() -> None:
    live: ChunkedDict[str, int] = ChunkedDict({"a": 1})
    first = live.frozen()
    live["b"] = 2
    del live["a"]
    live["b"] = 3
    second = live.frozen_keys()
    assert second.changed_since(first) == ["b", "a", "b"]
    assert second.changed_since(second) == []
    assert first.changed_since(second) is None  # a later snapshot
    assert second.changed_since(ChunkedDict[str, int]().frozen()) is None  # another map
    assert second.changed_since({"b": 3}) is None


@given(_OPS, st.integers(1, 8))
def test_picked_follows_snapshots_whatever_the_log_keeps(
    ops: list[tuple[str, int, int]], log_limit: int
) -> None:
    """Both ways of looking again, mixed: the log starts anew every ``log_limit`` changes."""
    picked: Picked[str, int, int] = Picked(lambda value: value * 10 if value % 2 == 0 else None)
    with patch("gateway.metadata.chunked.CHANGE_LOG_LIMIT", log_limit):
        for snapshot in _snapshots(ops):
            assert dict(picked(snapshot)) == {k: v * 10 for k, v in snapshot.items() if v % 2 == 0}


@given(st.dictionaries(st.integers(0, 3000).map(lambda n: f"k{n}"), st.integers()), _OPS)
def test_picked_follows_snapshots_of_a_map_started_from_a_base(
    base: dict[str, int], ops: list[tuple[str, int, int]]
) -> None:
    picked: Picked[str, int, int] = Picked(lambda value: value * 10 if value % 2 == 0 else None)
    for snapshot in _snapshots(ops, dict(base)):
        assert dict(picked(snapshot)) == {k: v * 10 for k, v in snapshot.items() if v % 2 == 0}
