"""The fleet fixtures (real gateway processes on a fresh namespace) for these tests too."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.integration.fleet.conftest import Fleet, fleet, namespace

__all__ = ["fleet", "graceful_stop", "namespace"]


@pytest.fixture(autouse=True)
def graceful_stop(fleet: Fleet) -> Iterator[None]:
    """Stop the test's replicas with SIGTERM before the fleet kills what is left: their
    ZooKeeper sessions then close with them, instead of leaving ephemeral nodes behind until
    they expire while the namespace's metadata is being deleted."""
    yield
    running = [
        process
        for process in fleet.processes
        if process.process is not None and process.process.poll() is None
    ]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.signal(signal.SIGTERM)
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait_exit(60)
