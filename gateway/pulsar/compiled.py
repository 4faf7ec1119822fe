"""The compiled module (native/*.c): building it, finding it, and whether to use it.

``make install`` builds ``_starlight_compiled`` with gcc against the libpulsar that
pulsar-client's wheel bundles (``python -m gateway.pulsar.compiled``), into a cache
directory keyed by the source, that libpulsar and the Python ABI, so a rebuilt source or a new
pulsar-client makes a new module instead of loading a stale one. ``TrioConsumer`` and
``TrioProducer`` use it when it is built and passes the layout check below (every pybind11
layout the C code reads); otherwise they use
pulsar-client's Python binding alone (the same behaviour at a higher CPU cost per message;
docs/performance.md). Nothing is compiled while the gateway runs.

The configuration key ``gatewayCompiledHotPath=false`` (``ClientOptions.compiled``) turns it
off; the consumer and producer tests run both ways.
"""

from __future__ import annotations

import logging
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Final

import gateway.native_build as native_build
from gateway.native_build import BuildError, CannotBuild
from gateway.pulsar.native_objects import LAYOUT_CLASSES, layout_problem, libpulsar_paths

__all__ = ["BuildError", "CannotBuild", "build", "compile_extension", "load", "module_path"]

MODULE_NAME: Final = "_starlight_compiled"
SOURCE_DIR: Final = Path(__file__).with_name("native")


def sources() -> list[Path]:
    """The module's C files (its headers are in the same directory)."""
    return sorted(SOURCE_DIR.glob("*.c"))


def module_path() -> Path | None:
    """Where the module for these sources, libpulsar and Python is (built or not); None
    without a bundled libpulsar or without the sources (an install that did not ship them)."""
    libs = libpulsar_paths()
    if not libs:
        return None
    return native_build.module_path(MODULE_NAME, SOURCE_DIR, str(libs[0]).encode())


def build() -> Path:
    """Compile the module unless it is there already; its path."""
    path = module_path()
    if path is None:
        raise CannotBuild(f"no libpulsar in pulsar-client's wheel, or no sources in {SOURCE_DIR}")
    if not path.exists():
        compile_extension(sources(), path)
    return path


def compile_extension(files: list[Path], path: Path) -> None:
    """gcc ``files`` into the extension module ``path``, linked against the libpulsar of
    pulsar-client's wheel (also what bench/pulsar_direct.py's C API load is built with)."""
    libs = libpulsar_paths()
    if not libs:
        raise CannotBuild("pulsar-client's wheel bundles no libpulsar to link against")
    libpulsar = libs[0]
    link = [
        f"-L{libpulsar.parent}",
        f"-l:{libpulsar.name}",
        f"-Wl,-rpath,{libpulsar.parent}",
        "-lpthread",
    ]
    native_build.compile_extension(files, path, link)


@cache
def _loaded() -> ModuleType | None:
    return native_build.load_built(
        MODULE_NAME,
        module_path(),
        _bind_and_check,
        builder="gateway.pulsar.compiled",
        fallback="consumers and producers use pulsar-client's binding alone",
    )


def _bind_and_check(module: ModuleType) -> None:
    import _pulsar

    module.bind_types(_pulsar.ConsumerConfiguration, _pulsar.Consumer, _pulsar.Producer)
    _check_layout(module)


def _check_layout(module: ModuleType) -> None:
    """Every binding class whose objects the module reads (native/common.h, ``cpp_object``)
    has the pybind11 instance layout it expects (``native_objects.layout_problem``, which
    reads nothing through the pointer it finds); then values set through the binding read
    back through the C API where the module looks: a configuration's receiver queue size
    (twice, two values), and a default consumer's and producer's topic. Anything off raises,
    naming what differs, and ``load_built`` logs it once and leaves the binding path."""
    import _pulsar

    for name in LAYOUT_CLASSES:
        problem = layout_problem(getattr(_pulsar, name, None))
        if problem is not None:
            raise RuntimeError(problem)
    conf = _pulsar.ConsumerConfiguration()
    for size in (1234, 4321):
        conf.receiver_queue_size(size)
        read = module.receiver_queue_size(conf)
        if read != size:
            raise RuntimeError(
                f"_pulsar.ConsumerConfiguration: a receiver queue size of {size} read back "
                f"through the C API as {read}"
            )
    for kind, read_topic in (
        (_pulsar.Consumer, module.consumer_topic),
        (_pulsar.Producer, module.producer_topic),
    ):
        native = kind()
        if read_topic(native) != native.topic():
            raise RuntimeError(
                f"_pulsar.{kind.__name__}: the topic read through the C API is not the binding's"
            )


def load() -> ModuleType | None:
    """The compiled module if it is built and works with this pulsar-client; else None."""
    if sys.implementation.name != "cpython":
        return None
    return _loaded()


def main() -> int:
    """``make install``: build the module (without gcc the gateway uses pulsar-client's
    binding alone)."""
    return native_build.install("compiled module", build, _loaded)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())
