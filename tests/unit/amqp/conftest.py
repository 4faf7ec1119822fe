"""Fixtures of the protocol core's tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from gateway.amqp import compiled
from gateway.amqp import connection as connection_module
from tests.support.compiled_modules import require_built


def require_frame_scan() -> compiled.FrameScan:
    """The compiled frame scan (skipped without gcc, a failure if not built)."""
    return require_built(compiled.frame_scan(), "the compiled frame scan")


def require_property_check() -> Callable[[bytes], bool]:
    """The frame scan's own check of a property list (as ``require_frame_scan``)."""
    return require_built(compiled.property_check(), "the compiled frame scan")


@pytest.fixture(params=["compiled", "python"], scope="module")
def both_frame_paths(request: pytest.FixtureRequest) -> Iterator[str]:
    """For modules that drive ``ServerConnection`` (``pytestmark = usefixtures``): their
    connections hand reads to the compiled frame scan first, then take every frame in Python.
    Module-scoped, so that Hypothesis tests run under it too."""
    if request.param == "compiled":
        require_frame_scan()
        yield "compiled"
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(connection_module, "frame_scan", lambda: None)
        yield "python"
