"""The process's memory allocator: jemalloc where the system has it (``gatewayMemoryAllocator``).

Every message the gateway moves allocates and frees a few blocks of about its size (the body
read from the AMQP socket, pulsar-client's payload and its copy in the Python message, the
encoded delivery), beside many small ones (pulsar-client's protobuf strings and shared pointers).
With the C library's allocator a request of 1 KiB or more first merges all freed small
blocks (``malloc_consolidate``): under PerfTest's 1,000-byte messages, glibc's malloc and free
took ~13 % of the trio thread and ~12 % of pulsar-client's I/O thread (perf). jemalloc keeps
small and large sizes apart; with it the gateway spent 0.86x the CPU per message and moved
1.10x the messages (medians of 12 interleaved PerfTest pairs, docs/benchmarks.md).

An allocator has to be in place before the first allocation, so it cannot be switched from
Python: the command re-executes itself once, with jemalloc in ``LD_PRELOAD`` (the same
process id, before any thread, socket or file of the gateway exists). ``--workers``' children
inherit the variable.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

# gatewayMemoryAllocator's values besides "auto" (gateway.config.keys.ALLOCATORS).
JEMALLOC: Final = "jemalloc"
SYSTEM: Final = "system"

# Debian's and most distributions' soname; ``ctypes.util.find_library`` asks the loader's cache.
_SONAME_PREFIX: Final = "libjemalloc.so"


def find_jemalloc() -> str | None:
    """jemalloc's shared library as the dynamic loader finds it, or None."""
    return ctypes.util.find_library(JEMALLOC)


_OWN_MAPS: Final = Path("/proc/self/maps")


def jemalloc_loaded(maps: Path = _OWN_MAPS) -> bool:
    """Whether jemalloc is mapped into this process."""
    try:
        return _SONAME_PREFIX in maps.read_text()
    except OSError:
        return False


class AllocatorUnavailable(Exception):
    """``gatewayMemoryAllocator=jemalloc`` on a system without it."""


def preload_for(
    choice: str,
    environ: Mapping[str, str],
    *,
    loaded: bool,
    find: Callable[[], str | None] = find_jemalloc,
) -> str | None:
    """The ``LD_PRELOAD`` to re-execute with for ``choice``, or None to go on as we are.
    ``loaded``: jemalloc is already in this process. Raises AllocatorUnavailable when
    jemalloc is required and cannot be had."""
    if choice == SYSTEM or loaded:
        return None
    library = find()
    preload = environ.get("LD_PRELOAD", "")
    if library is None or library in preload.split():
        # Not there, or preloaded already and still not loaded (the loader refused it: it
        # printed why): a second exec would do no better.
        if choice == JEMALLOC:
            raise AllocatorUnavailable(
                "gatewayMemoryAllocator=jemalloc, but "
                + (
                    "no jemalloc library was found (Debian: apt-get install libjemalloc2)"
                    if library is None
                    else f"{library} in LD_PRELOAD was not loaded"
                )
                + "; use auto or system to run with the C library's allocator"
            )
        return None
    return f"{library} {preload}".strip()


def use(choice: str) -> None:
    """Run on ``choice``'s allocator: returns when the process already does (or ``auto``
    found no jemalloc); otherwise re-executes the command line with it, and never returns."""
    preload = preload_for(choice, os.environ, loaded=jemalloc_loaded())
    if preload is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, {**os.environ, "LD_PRELOAD": preload})


def in_use(maps: Path = _OWN_MAPS) -> str:
    """The allocator a process runs on (this one by default, or the one of ``maps``), for
    a log line."""
    return JEMALLOC if jemalloc_loaded(maps) else "the C library's"
