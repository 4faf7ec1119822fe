"""The compiled module (native/*.c): building it, finding it, and whether to use it.

``make install`` builds ``_starlight_compiled`` with gcc against the libpulsar that
pulsar-client's wheel bundles (``python -m gateway.pulsar.compiled``), into a cache
directory keyed by the source, that libpulsar and the Python ABI, so a rebuilt source or a new
pulsar-client makes a new module instead of loading a stale one. ``TrioConsumer`` and
``TrioProducer`` use it when it is built and passes the layout check below; otherwise they use
pulsar-client's Python binding alone (the same behaviour at a higher CPU cost per message;
docs/performance.md). Nothing is compiled while the gateway runs.

The configuration key ``gatewayCompiledHotPath=false`` (``ClientOptions.compiled``) turns it
off; the consumer and producer tests run both ways.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Final

from gateway.pulsar.native_objects import libpulsar_paths

__all__ = ["BuildError", "CannotBuild", "build", "compile_extension", "load", "module_path"]

log = logging.getLogger(__name__)

MODULE_NAME: Final = "_starlight_compiled"
SOURCE_DIR: Final = Path(__file__).with_name("native")
_COMPILE_TIMEOUT: Final = 120


class BuildError(RuntimeError):
    """The source did not compile."""


class CannotBuild(BuildError):
    """Nothing to build with here (no compiler, or no libpulsar in pulsar-client's wheel)."""


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "starlight-rabbitmq" / "native"


def sources() -> list[Path]:
    """The module's C files (its headers are in the same directory)."""
    return sorted(SOURCE_DIR.glob("*.c"))


def module_path() -> Path | None:
    """Where the module for these sources, libpulsar and Python is (built or not); None
    without a bundled libpulsar or without the sources (an install that did not ship them)."""
    libs = libpulsar_paths()
    files = sorted(SOURCE_DIR.glob("*.[ch]"))
    if not libs or not files:
        return None
    digest = hashlib.sha256(str(libs[0]).encode() + sys.version.encode())
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    key = digest.hexdigest()[:16]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return _cache_root() / key / f"{MODULE_NAME}{suffix}"


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
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise CannotBuild("no C compiler (gcc) on PATH")
    libpulsar = libs[0]
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    command = [
        gcc,
        "-O2",
        "-Wall",
        "-shared",
        "-fPIC",
        f"-I{sysconfig.get_paths()['include']}",
        *(str(file) for file in files),
        "-o",
        str(partial),
        f"-L{libpulsar.parent}",
        f"-l:{libpulsar.name}",
        f"-Wl,-rpath,{libpulsar.parent}",
        "-lpthread",
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT, check=False
    )
    if result.returncode != 0:
        names = ", ".join(file.name for file in files)
        raise BuildError(f"compiling {names} failed:\n{result.stderr[-4000:]}")
    partial.rename(path)  # atomic: a concurrent build or load never sees half a file


@cache
def _loaded() -> ModuleType | None:
    path = module_path()
    if path is None or not path.exists():
        log.info(
            "the compiled module is not built (python -m gateway.pulsar.compiled): "
            "consumers and producers use pulsar-client's binding alone"
        )
        return None
    try:
        loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, str(path))
        spec = importlib.util.spec_from_file_location(MODULE_NAME, path, loader=loader)
        if spec is None:
            raise ImportError(f"no module spec for {path}")
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        import _pulsar

        module.bind_types(_pulsar.ConsumerConfiguration, _pulsar.Consumer, _pulsar.Producer)
        _check_layout(module)
    except Exception as error:  # another build or layout: the binding still works
        log.warning("the compiled module cannot be used: %s", error)
        return None
    return module


def _check_layout(module: ModuleType) -> None:
    """The module reads a configuration's receiver queue size through the C API where it
    expects the C++ object: it must be what the binding set (twice, two values)."""
    import _pulsar

    conf = _pulsar.ConsumerConfiguration()
    for size in (1234, 4321):
        conf.receiver_queue_size(size)
        read = module.receiver_queue_size(conf)
        if read != size:
            raise RuntimeError(f"a configuration's receiver queue size read back as {read}")


def load() -> ModuleType | None:
    """The compiled module if it is built and works with this pulsar-client; else None."""
    if sys.implementation.name != "cpython":
        return None
    return _loaded()


def main() -> int:
    """``make install``: build the module. Without gcc, say so and go on (the gateway then uses
    pulsar-client's binding alone); a source that does not compile fails the install."""
    try:
        path = build()
    except CannotBuild as error:
        print(f"compiled module not built: {error}", file=sys.stderr)
        return 0
    module = _loaded()
    print(f"compiled module: {path} ({'in use' if module else 'NOT usable, see the log'})")
    return 0 if module else 1


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())
