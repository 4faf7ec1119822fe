"""Pulsar's C API on pulsar-client's own objects: where the Python binding keeps each C++
object, and the libpulsar it loaded.

The binding has no C API of its own, but the libpulsar its wheel bundles exports Pulsar's C
API, whose handles are structs holding exactly one C++ object (``pulsar_consumer_configuration_t``
a ``pulsar::ConsumerConfiguration``, ``pulsar_producer_t`` a ``pulsar::Producer``, ...). The
binding is pybind11, whose instances of a class with one C++ type and the default holder keep a
pointer to that C++ object right after their Python header: that pointer is a valid handle.
Callers check the layout before relying on it (priority_level.py reads values back through the
C API) and fall back when it is not the expected one.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Final

__all__ = ["cpp_address", "libpulsar_paths"]

# Where the pointer to the C++ object sits in a pybind11 instance: after ob_refcnt and ob_type.
_VALUE_OFFSET: Final = 2 * ctypes.sizeof(ctypes.c_void_p)


def cpp_address(instance: Any) -> int:
    """The address of the C++ object a pybind11 instance of the binding holds."""
    value = ctypes.c_void_p.from_address(id(instance) + _VALUE_OFFSET).value
    if not value:
        raise RuntimeError(f"the {type(instance).__name__} holds no C++ object")
    return value


def libpulsar_paths() -> list[Path]:
    """The libpulsar shipped in pulsar-client's wheel (``pulsar_client.libs``), if any."""
    import _pulsar

    here = Path(_pulsar.__file__).parent
    return sorted((here / "pulsar_client.libs").glob("libpulsar*.so*"))
