"""Fixtures of the protocol core's tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from gateway.amqp import compiled
from gateway.amqp import connection as connection_module


def require_frame_scan() -> compiled.FrameScan:
    """The compiled frame scan; skipped without gcc, a failure if gcc is here but the scan was
    not built (``make install`` builds it)."""
    scan = compiled.frame_scan()
    if scan is None:
        if shutil.which("gcc") is None:
            pytest.skip("no gcc: the compiled frame scan cannot be built here")
        pytest.fail("the compiled frame scan is not built (make install builds it)")
    return scan


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
