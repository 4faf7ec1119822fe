"""LoadGc: the collector is off while any load runs, back on (loaded objects frozen) after."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.metadata.load_gc import LoadGc


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        gc.unfreeze()
        if not was:
            gc.disable()


def test_overlapping_loads_hold_the_collector_until_the_last_ends(collector_on: None) -> None:
    loads = LoadGc()
    loads.hold()
    loads.hold()
    assert not gc.isenabled()
    loads.release()
    assert not gc.isenabled() and loads.loads == 1
    before = gc.get_freeze_count()
    survivor = [object() for _ in range(10)]
    loads.release()
    assert gc.isenabled() and loads.loads == 0
    assert gc.get_freeze_count() >= before + len(survivor)


def test_small_loads_leave_the_collector_as_it_was(collector_on: None) -> None:
    loads = LoadGc()
    before = gc.get_freeze_count()
    loads.hold()
    survivor = [object() for _ in range(10)]
    loads.release(freeze=False)
    assert gc.isenabled() and gc.get_freeze_count() == before and survivor


def test_one_large_load_among_overlapping_ones_freezes(collector_on: None) -> None:
    loads = LoadGc()
    before = gc.get_freeze_count()
    loads.hold()
    loads.hold()
    loads.release(freeze=True)
    loads.release(freeze=False)
    assert gc.isenabled() and gc.get_freeze_count() > before


def test_a_collector_that_was_off_stays_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        loads = LoadGc()
        loads.hold()
        loads.release()
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_release_without_hold_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        LoadGc().release()
