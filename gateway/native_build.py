"""Building and loading the gateway's C extension modules (``gateway/amqp/native/``,
``gateway/pulsar/native/``), shared by ``gateway/amqp/compiled.py`` and
``gateway/pulsar/compiled.py``.

``make install`` compiles each with gcc into a cache directory outside the repository, keyed
by its sources, the Python build and whatever else it depends on (pulsar-client's libpulsar
for the Pulsar one), so that a changed source or dependency makes a new module instead of
loading a stale one. Nothing is compiled while the gateway runs: a module that is not built
leaves its layer on the pure-Python path.
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
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

__all__ = [
    "SANITIZE_ENV",
    "BuildError",
    "CannotBuild",
    "asan_library",
    "compile_extension",
    "install",
    "load_built",
    "load_extension",
    "module_path",
]

log = logging.getLogger(__name__)

_COMPILE_TIMEOUT: Final = 120


class BuildError(RuntimeError):
    """The source did not compile."""


class CannotBuild(BuildError):
    """Nothing to build with here (no compiler, or a dependency missing)."""


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "starlight-rabbitmq" / "native"


def module_path(name: str, source_dir: Path, depends_on: bytes = b"") -> Path | None:
    """Where module ``name`` built from ``source_dir``'s C files and headers is (built or
    not), keyed by them, this Python and ``depends_on``; None without sources (an install
    that did not ship them)."""
    files = sorted(source_dir.glob("*.[ch]"))
    if not files:
        return None
    digest = hashlib.sha256(depends_on + b"\0" + sys.version.encode())
    sanitize = os.environ.get(SANITIZE_ENV, "")
    if sanitize:  # an instrumented build is another module (unchanged keys otherwise)
        digest.update(b"\0sanitize=" + sanitize.encode())
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return _cache_root() / digest.hexdigest()[:16] / f"{name}{suffix}"


# STARLIGHT_NATIVE_SANITIZE=address builds the modules with AddressSanitizer (the test that
# runs them so, tests/integration/test_native_asan.py, builds into a cache of its own; the
# process then needs libasan preloaded: ``asan_library``).
SANITIZE_ENV: Final = "STARLIGHT_NATIVE_SANITIZE"
_SANITIZE_FLAGS: Final = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1")


def asan_library() -> Path | None:
    """gcc's libasan.so (to LD_PRELOAD into a Python running ASan-built modules), or None
    without gcc or without libasan."""
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    result = subprocess.run(
        [gcc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
    )
    found = Path(result.stdout.strip())
    return (
        found.resolve()
        if result.returncode == 0 and found.is_absolute() and found.exists()
        else None
    )


def compile_extension(files: Sequence[Path], path: Path, link: Sequence[str] = ()) -> None:
    """gcc ``files`` into the extension module ``path``, with ``link``'s linker arguments
    (instrumented by AddressSanitizer when ``STARLIGHT_NATIVE_SANITIZE=address``)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise CannotBuild("no C compiler (gcc) on PATH")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    sanitize = os.environ.get(SANITIZE_ENV, "")
    if sanitize not in ("", "address"):
        raise BuildError(f"{SANITIZE_ENV}={sanitize!r}: only 'address' is supported")
    flags = list(_SANITIZE_FLAGS) if sanitize else ["-O2"]
    command = [
        gcc,
        *flags,
        "-Wall",
        "-shared",
        "-fPIC",
        f"-I{sysconfig.get_paths()['include']}",
        *(str(file) for file in files),
        "-o",
        str(partial),
        *link,
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=_COMPILE_TIMEOUT, check=False
    )
    if result.returncode != 0:
        names = ", ".join(file.name for file in files)
        raise BuildError(f"compiling {names} failed:\n{result.stderr[-4000:]}")
    partial.rename(path)  # atomic: a concurrent build or load never sees half a file


def load_extension(name: str, path: Path) -> ModuleType:
    """Import the built module at ``path``; ImportError (or the module's own) if it cannot."""
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise ImportError(f"no module spec for {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load_built(
    name: str,
    path: Path | None,
    prepare: Callable[[ModuleType], object],
    *,
    builder: str,
    fallback: str,
) -> ModuleType | None:
    """The module at ``path`` once ``prepare`` (its own setup and checks) accepted it; None,
    logged with what happens instead (``fallback``), if it is not built (``builder``: the
    command that builds it) or cannot be used here."""
    if path is None or not path.exists():
        log.info("%s is not built (python -m %s): %s", name, builder, fallback)
        return None
    try:
        module = load_extension(name, path)
        prepare(module)
    except Exception as error:  # another build, or a check failed: the fallback still works
        log.warning("%s cannot be used (%s): %s", name, error, fallback)
        return None
    return module


def install(label: str, build: Callable[[], Path], load: Callable[[], object]) -> int:
    """``make install``'s step for one module: build it, load it, say which. Without a
    compiler that is said and the step succeeds (the fallback is used); a source that does not
    compile, or a module that does not load, fails it."""
    try:
        path = build()
    except CannotBuild as error:
        print(f"{label} not built: {error}", file=sys.stderr)
        return 0
    usable = load() is not None
    print(f"{label}: {path} ({'in use' if usable else 'NOT usable, see the log'})")
    return 0 if usable else 1
