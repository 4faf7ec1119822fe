"""The gateway's compiled modules in tests: skipped where they cannot be built (no gcc), a
failure where they could be but were not (``make install`` builds them)."""

from __future__ import annotations

import shutil
from typing import TypeVar

import pytest

T = TypeVar("T")


def require_built(loaded: T | None, what: str) -> T:
    """``loaded`` (what a ``compiled`` module's loader returned) or skip/fail naming ``what``."""
    if loaded is None:
        if shutil.which("gcc") is None:
            pytest.skip(f"no gcc: {what} cannot be built here")
        pytest.fail(f"{what} is not built (make install builds it)")
    return loaded
