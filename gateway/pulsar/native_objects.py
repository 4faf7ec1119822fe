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

__all__ = ["LAYOUT_CLASSES", "binding_client", "cpp_address", "layout_problem", "libpulsar_paths"]

_WORD: Final = ctypes.sizeof(ctypes.c_void_p)
# Where the pointer to the C++ object sits in a pybind11 instance: after ob_refcnt and ob_type.
_VALUE_OFFSET: Final = 2 * _WORD
# pybind11's ``instance`` (pybind11/detail/common.h) as pulsar-client 3.13.0's binding has it
# (pybind11 2.x): the Python header (2 words), ``simple_value_holder[1 + 2]`` (the value
# pointer, then the holder: a ``std::unique_ptr`` or ``std::shared_ptr``, whose first word
# is that same pointer), ``weakrefs``, then the flag bits (owned, simple_layout,
# simple_holder_constructed, simple_instance_registered, ...).
_HOLDER_OFFSET: Final = 3 * _WORD
_BASIC_SIZE: Final = 7 * _WORD
_FLAGS_OFFSET: Final = 6 * _WORD
_SIMPLE_LAYOUT: Final = 0x02
_HOLDER_CONSTRUCTED: Final = 0x04

# The binding's classes whose instances the compiled module (native/*.c, ``cpp_object``) and
# priority_level.py read this way.
LAYOUT_CLASSES: Final = ("ConsumerConfiguration", "Consumer", "Producer")


def binding_client(client: Any) -> Any:
    """The binding's ``_pulsar.Client`` inside a ``pulsar.Client`` (pulsar-client keeps it in
    ``_client`` and has no public way to it; the gateway calls the binding's ``*_async``
    methods on it)."""
    return client._client


def cpp_address(instance: Any) -> int:
    """The address of the C++ object a pybind11 instance of the binding holds."""
    value = ctypes.c_void_p.from_address(id(instance) + _VALUE_OFFSET).value
    if not value:
        raise RuntimeError(f"the {type(instance).__name__} holds no C++ object")
    return value


def layout_problem(cls: Any) -> str | None:
    """What differs, for the pybind11 class ``cls`` of the binding, from the instance layout
    ``cpp_address`` (and native/common.h's ``cpp_object``) rely on; None if nothing does.

    Reads only inside a fresh, default-constructed Python object (never through the pointer
    it finds), so it is safe on a binding whose layout changed."""
    name = f"_pulsar.{getattr(cls, '__name__', cls)}"
    if type(cls).__name__ != "pybind11_type":
        return f"{name} is not a pybind11 class (its metaclass is {type(cls).__name__})"
    bases = [base.__name__ for base in cls.__mro__[1:]]
    if bases != ["pybind11_object", "object"]:
        return f"{name} derives from {bases}, not pybind11_object alone (pybind11's simple layout)"
    if cls.__basicsize__ != _BASIC_SIZE:
        return (
            f"{name}'s pybind11 instance is {cls.__basicsize__} bytes, not {_BASIC_SIZE} "
            "(another pybind11 instance layout)"
        )
    try:
        instance = cls()
    except Exception as error:
        return f"{name}() cannot be made to check its layout ({type(error).__name__}: {error})"
    value = ctypes.c_void_p.from_address(id(instance) + _VALUE_OFFSET).value
    held = ctypes.c_void_p.from_address(id(instance) + _HOLDER_OFFSET).value
    flags = ctypes.c_uint8.from_address(id(instance) + _FLAGS_OFFSET).value
    if not flags & _SIMPLE_LAYOUT or not flags & _HOLDER_CONSTRUCTED:
        return (
            f"{name}'s pybind11 instance flags are {flags:#x}: not a simple layout with its holder"
        )
    if not value or value != held:
        return (
            f"{name}'s pybind11 instance does not hold its C++ object's address at word 2 "
            "(value and holder differ)"
        )
    return None


def libpulsar_paths() -> list[Path]:
    """The libpulsar shipped in pulsar-client's wheel (``pulsar_client.libs``), if any."""
    import _pulsar

    here = Path(_pulsar.__file__).parent
    return sorted((here / "pulsar_client.libs").glob("libpulsar*.so*"))
