"""Contract tests for the pulsar-client internals the compiled hot path relies on
(gateway/pulsar/native_objects.py, native/*.c), one per internal, on this environment's
pulsar-client (pinned in pyproject.toml): each fails naming the internal when a version
changed it. Then the fallback: a changed layout leaves the compiled module unused with one
warning, instead of letting C read the wrong memory.

The internals:
* pybind11's instance layout of each binding class whose objects C reads (``cpp_object`` in
  native/common.h, ``cpp_address`` here): ``ConsumerConfiguration``, ``Consumer``,
  ``Producer``;
* each function of Pulsar's C API declared by hand in native/common.h (the wheel ships no
  headers): exported by the libpulsar pulsar-client's wheel bundles;
* the C API's handle being the C++ object itself (a struct holding exactly one), per class:
  a value set through the binding reads back through the C API.
"""

from __future__ import annotations

import ctypes
import logging
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import _pulsar
import pytest

from gateway import native_build
from gateway.pulsar import compiled
from gateway.pulsar.native_objects import (
    LAYOUT_CLASSES,
    binding_client,
    cpp_address,
    layout_problem,
    libpulsar_paths,
)
from tests.support.compiled_modules import require_built

COMMON_H = Path(compiled.SOURCE_DIR) / "common.h"


def c_api_functions() -> list[str]:
    """The C API functions native/common.h declares (``pulsar_...(`` at a line's start or
    after a return type)."""
    text = COMMON_H.read_text()
    declared = re.findall(r"^[\w\s\*]*?\b(pulsar_\w+)\s*\(", text, flags=re.MULTILINE)
    return sorted(set(declared))


def test_common_h_declares_the_c_api_it_uses() -> None:
    names = c_api_functions()
    assert "pulsar_consumer_configuration_set_message_listener" in names
    assert "pulsar_producer_send_async" in names
    assert len(names) >= 25


@pytest.mark.parametrize("name", LAYOUT_CLASSES)
def test_pybind11_layout_of(name: str) -> None:
    """pybind11 keeps the C++ object's address right after the Python header."""
    cls = getattr(_pulsar, name, None)
    assert cls is not None, f"internal changed: pulsar-client has no _pulsar.{name}"
    problem = layout_problem(cls)
    assert problem is None, f"internal changed: pybind11 layout of _pulsar.{name}: {problem}"


@pytest.mark.parametrize("function", c_api_functions())
def test_libpulsar_exports(function: str) -> None:
    libs = libpulsar_paths()
    assert libs, "internal changed: pulsar-client's wheel bundles no libpulsar"
    library = ctypes.CDLL(str(libs[0]))
    assert hasattr(library, function), (
        f"internal changed: the bundled {libs[0].name} does not export {function} "
        "(declared by hand in gateway/pulsar/native/common.h)"
    )


@pytest.fixture
def module() -> ModuleType:
    return require_built(compiled.load(), "the compiled module")


def test_c_api_handle_is_the_consumer_configuration(module: ModuleType) -> None:
    conf = _pulsar.ConsumerConfiguration()
    for size in (3, 30_000):
        conf.receiver_queue_size(size)
        assert module.receiver_queue_size(conf) == size, (
            "internal changed: pulsar_consumer_configuration_t is not the C++ "
            "ConsumerConfiguration at the pybind11 value pointer"
        )


@pytest.mark.parametrize("name", ["Consumer", "Producer"])
def test_c_api_handle_is_the(module: ModuleType, name: str) -> None:
    native = getattr(_pulsar, name)()
    read = module.consumer_topic if name == "Consumer" else module.producer_topic
    assert read(native) == native.topic(), (
        f"internal changed: pulsar_{name.lower()}_t is not the C++ {name} at the pybind11 "
        "value pointer"
    )


def test_binding_client_is_the_pulsar_clients_own() -> None:
    import pulsar

    client = pulsar.Client("pulsar://127.0.0.1:1")  # connects only when first used
    try:
        assert isinstance(binding_client(client), _pulsar.Client)
    finally:
        client.close()


def test_cpp_address_is_the_value_pointer() -> None:
    conf = _pulsar.ConsumerConfiguration()
    assert cpp_address(conf) == ctypes.c_void_p.from_address(id(conf) + 3 * 8).value


def test_a_class_of_another_layout_is_named() -> None:
    class Plain:
        pass

    assert "not a pybind11 class" in (layout_problem(Plain) or "")
    assert "cannot be made" in (layout_problem(_pulsar.Client) or "")


def test_a_changed_layout_falls_back_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What the gateway does on a pulsar-client whose layout differs: no compiled module,
    one WARNING naming the difference; consumers and producers use the binding."""
    path = compiled.module_path()
    if path is None or not path.exists():
        require_built(None, "the compiled module")

    def changed(cls: Any) -> str | None:
        if getattr(cls, "__name__", "") == "Producer":
            return "_pulsar.Producer's pybind11 instance is 64 bytes, not 56"
        return None

    monkeypatch.setattr(compiled, "layout_problem", changed)
    caplog.set_level(logging.INFO, logger=native_build.__name__)
    assert (
        native_build.load_built(
            compiled.MODULE_NAME,
            path,
            compiled._bind_and_check,
            builder="gateway.pulsar.compiled",
            fallback="consumers and producers use pulsar-client's binding alone",
        )
        is None
    )
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "_pulsar.Producer's pybind11 instance is 64 bytes" in warnings[0].getMessage()
    assert "binding alone" in warnings[0].getMessage()
