"""Pulsar's consumer priority level, which pulsar-client for Python does not expose.

A Shared subscription's dispatcher (the broker's ``AbstractDispatcherMultipleConsumers``)
sends each message to a consumer of the highest priority level that has permits, round-robin
among consumers of one level, and to lower levels only while no higher one has permits: it is
RabbitMQ's consumer priority (docs/compatibility.md, "Consumer priorities"), applied by the
broker to every consumer of the subscription on any replica. Pulsar's level 0 is the highest.

The Python package's ``_pulsar.ConsumerConfiguration`` has no setter for it, but the
libpulsar it loads exports the C API's ``pulsar_consumer_configuration_set_priority_level``,
whose ``pulsar_consumer_configuration_t`` is a struct holding exactly one C++
``pulsar::ConsumerConfiguration``, so a pointer to the C++ object is a valid argument. The
pybind11 object holds a pointer to that C++ object right after its Python header (pybind11's
"simple layout" for a class with one C++ type and the default holder).

Nothing here is trusted blindly: ``PriorityLevels.load()`` checks, on a scratch configuration,
that the pointer found that way is the configuration (the C API reads back two values set
through the Python API) and that a level set is read back; if anything is off (another
pulsar-client build, another pybind11 layout), ``available`` is False and the gateway refuses
``x-priority`` instead of ignoring it. Levels are checked before the call: the C++ setter
throws on a negative level, which would abort the process.
"""

from __future__ import annotations

import ctypes
import logging
import sys
from typing import Any, Final

from gateway.pulsar.native_objects import cpp_address, layout_problem, libpulsar_paths

__all__ = ["BASE_LEVEL", "PriorityLevels", "level_for", "priority_levels"]

log = logging.getLogger(__name__)

# The Pulsar level of AMQP priority 0: every consumer the gateway makes gets BASE_LEVEL less its
# x-priority, so that AMQP's higher-is-first becomes Pulsar's lower-is-first and priorities
# below 0 stay above Pulsar's floor of 0. Priorities beyond ±2^30 are clamped (order is kept
# among all others).
BASE_LEVEL: Final = 2**30
_MAX_LEVEL: Final = 2**31 - 1


def level_for(priority: int) -> int:
    """The Pulsar priority level of a consumer with AMQP consumer priority ``priority``."""
    return max(0, min(_MAX_LEVEL, BASE_LEVEL - priority))


def _libpulsar() -> ctypes.CDLL | None:
    """The libpulsar that ``_pulsar`` loaded (the wheel ships it in pulsar_client.libs)."""
    candidates = [str(path) for path in libpulsar_paths()] or ["libpulsar.so"]
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate)
        except OSError:
            continue
    return None


class PriorityLevels:
    """Sets the priority level of ``_pulsar.ConsumerConfiguration`` objects, if it can."""

    def __init__(self) -> None:
        self._set: Any = None
        self._get: Any = None
        self.why_not = "not loaded"

    @property
    def available(self) -> bool:
        return self._set is not None

    def load(self) -> PriorityLevels:
        """Find the C API and check that it works on this build (see the module docstring)."""
        if sys.implementation.name != "cpython":
            self.why_not = "the Python implementation is not CPython"
            return self
        try:
            self._load()
        except Exception as error:  # any surprise means: not available
            self._set = self._get = None
            self.why_not = f"{type(error).__name__}: {error}"
        if self._set is None:
            log.warning(
                "consumer priorities (x-priority) are refused: this pulsar-client does not let "
                "the gateway set Pulsar's consumer priority level (%s)",
                self.why_not,
            )
        return self

    def _load(self) -> None:
        import _pulsar

        library = _libpulsar()
        if library is None:
            self.why_not = "libpulsar not found"
            return
        set_level = library.pulsar_consumer_configuration_set_priority_level
        set_level.argtypes = [ctypes.c_void_p, ctypes.c_int]
        set_level.restype = None
        get_level = library.pulsar_consumer_configuration_get_priority_level
        get_level.argtypes = [ctypes.c_void_p]
        get_level.restype = ctypes.c_int
        get_queue = library.pulsar_consumer_configuration_get_receiver_queue_size
        get_queue.argtypes = [ctypes.c_void_p]
        get_queue.restype = ctypes.c_int
        problem = layout_problem(_pulsar.ConsumerConfiguration)
        if problem is not None:
            self.why_not = problem
            return
        scratch = _pulsar.ConsumerConfiguration()
        pointer = cpp_address(scratch)
        for size in (17, 4099):
            scratch.receiver_queue_size(size)
            if get_queue(pointer) != size:
                self.why_not = "the configuration object's layout is not the expected one"
                return
        for level in (7, BASE_LEVEL):
            set_level(pointer, level)
            if get_level(pointer) != level or scratch.receiver_queue_size() != 4099:
                self.why_not = "a priority level set is not read back"
                return
        self._set, self._get = set_level, get_level
        self.why_not = ""

    def apply(self, configuration: Any, level: int) -> None:
        """Give ``configuration`` (a ``_pulsar.ConsumerConfiguration``) Pulsar priority level
        ``level`` (0 is the highest)."""
        if self._set is None:
            raise RuntimeError(f"consumer priority levels are not available: {self.why_not}")
        if not 0 <= level <= _MAX_LEVEL:
            raise ValueError(f"a Pulsar priority level is 0..{_MAX_LEVEL}, not {level}")
        self._set(cpp_address(configuration), level)


_loaded: PriorityLevels | None = None


def priority_levels() -> PriorityLevels:
    """The process's one ``PriorityLevels``, loaded (and checked) on first use."""
    global _loaded
    if _loaded is None:
        _loaded = PriorityLevels().load()
    return _loaded
