"""ChunkedDict: a dict whose snapshots stay as they were while the live map changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.metadata.chunked import ChunkedDict, FrozenChunkedMap, FrozenChunkedSet

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
