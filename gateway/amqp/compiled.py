"""The compiled frame scan (native/frames.c): building it, finding it, and whether to use it.

``make install`` builds ``_starlight_frames`` with gcc (``python -m gateway.amqp.compiled``)
into a cache directory keyed by its source and the Python build (``gateway/native_build.py``).
``ServerConnection`` hands it each read's bytes first when it is built and
``ConnectionSettings.compiled`` is on (``gatewayCompiledHotPath``): it takes the reads'
Basic.Publish triples and Basic.Acks that need no judgement and stops at anything else, which
the Python path then takes (the top of native/frames.c says exactly what it takes; its check
of a property list is ``properties.validate_properties``'s, held to it by the tests). Without
it the Python path takes every frame, with the same events and the same errors.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Final

import gateway.native_build as native_build
from gateway.amqp import events
from gateway.amqp.channel import Channel, ChannelState

__all__ = ["FrameScan", "build", "frame_scan", "module_path", "property_check"]

MODULE_NAME: Final = "_starlight_frames"
SOURCE_DIR: Final = Path(__file__).with_name("native")

FrameScan = Callable[[bytes | bytearray, int, int, dict[int, Channel], list[events.Event]], int]
"""``scan(buffer, pos, max_payload, channels, events)``: appends the events of the frames it
takes from ``pos`` on; the position of the first frame it did not take."""


def module_path() -> Path | None:
    """Where the module for this source and Python is (built or not)."""
    return native_build.module_path(MODULE_NAME, SOURCE_DIR)


def build() -> Path:
    """Compile the module unless it is there already; its path."""
    path = module_path()
    if path is None:
        raise native_build.CannotBuild(f"no sources in {SOURCE_DIR}")
    if not path.exists():
        native_build.compile_extension(sorted(SOURCE_DIR.glob("*.c")), path)
    return path


@cache
def _loaded() -> ModuleType | None:
    return native_build.load_built(
        MODULE_NAME,
        module_path(),
        lambda module: module.configure(
            events.PublishReceived, events.AckReceived, ChannelState.OPEN
        ),
        builder="gateway.amqp.compiled",
        fallback="every frame takes the Python path",
    )


def frame_scan() -> FrameScan | None:
    """The compiled scan if it is built and loads here; else None."""
    module = _loaded() if sys.implementation.name == "cpython" else None
    if module is None:
        return None
    scan: FrameScan = module.scan
    return scan


def property_check() -> Callable[[bytes], bool] | None:
    """The scan's own check of a property list (``valid_properties``), for the tests that
    hold it to ``properties.validate_properties``; None where the scan is not built."""
    module = _loaded() if sys.implementation.name == "cpython" else None
    if module is None:
        return None
    check: Callable[[bytes], bool] = module.valid_properties
    return check


def main() -> int:
    """``make install``: build the module (without gcc every frame takes the Python path)."""
    return native_build.install("compiled frame scan", build, _loaded)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    sys.exit(main())
