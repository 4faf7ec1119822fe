"""gatewayMemoryAllocator: when the command re-executes itself with jemalloc preloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import allocator
from gateway.allocator import AllocatorUnavailable, jemalloc_loaded, preload_for
from gateway.config.keys import ALLOCATORS

FOUND = "libjemalloc.so.2"


def found() -> str:
    return FOUND


def missing() -> None:
    return None


def test_the_allocators_named_here_are_the_configurations_values() -> None:
    assert {allocator.JEMALLOC, allocator.SYSTEM} < set(ALLOCATORS)


@pytest.mark.parametrize("choice", ["auto", "jemalloc"])
def test_jemalloc_is_preloaded_when_the_system_has_it(choice: str) -> None:
    assert preload_for(choice, {}, loaded=False, find=found) == FOUND
    # Whatever the user preloads stays, after it.
    assert preload_for(choice, {"LD_PRELOAD": "libx.so"}, loaded=False, find=found) == (
        f"{FOUND} libx.so"
    )


@pytest.mark.parametrize("choice", ALLOCATORS)
def test_nothing_to_do_once_jemalloc_is_loaded(choice: str) -> None:
    assert preload_for(choice, {}, loaded=True, find=found) is None


def test_system_is_never_re_executed() -> None:
    assert preload_for("system", {}, loaded=False, find=found) is None


def test_auto_without_jemalloc_goes_on_with_the_c_library() -> None:
    assert preload_for("auto", {}, loaded=False, find=missing) is None
    # Preloaded and still not loaded (the loader refused it): no second exec, no loop.
    assert preload_for("auto", {"LD_PRELOAD": FOUND}, loaded=False, find=found) is None


def test_jemalloc_required_and_not_to_be_had_is_an_error_naming_the_key() -> None:
    with pytest.raises(AllocatorUnavailable, match=r"=jemalloc, but no jemalloc.*libjemalloc2"):
        preload_for("jemalloc", {}, loaded=False, find=missing)
    with pytest.raises(AllocatorUnavailable, match="in LD_PRELOAD was not loaded"):
        preload_for("jemalloc", {"LD_PRELOAD": FOUND}, loaded=False, find=found)


def test_jemalloc_loaded_reads_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n")
    assert jemalloc_loaded(maps)
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert not jemalloc_loaded(maps)
    assert not jemalloc_loaded(tmp_path / "absent")
