"""Real gateway processes on a fresh namespace, in a ZooKeeper chroot of the test's own.

The chroot matters here more than anywhere: the shared stack's ZooKeeper also serves other
test runs, whose replicas load every namespace they find and stand for leader of it. Without
a chroot they would lead ours (and our replicas theirs): the queue gauges and
rabbitmq_queues, exported by each namespace's leader, would count other runs' queues, and
their replicas would re-create our namespace's metadata while it is being deleted.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.fleet.conftest import chroot, namespace
from tests.support.fleet import Fleet

__all__ = ["chroot", "fleet", "graceful_stop", "namespace"]


@pytest.fixture
def fleet(tmp_path: Path, pulsar_stack: Any, namespace: str, chroot: str) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, pulsar_stack, namespace, zookeeper=chroot)
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture(autouse=True)
def graceful_stop(fleet: Fleet) -> Iterator[None]:
    """Stop the test's replicas with SIGTERM before the fleet kills what is left: their
    ZooKeeper sessions then close with them, instead of leaving ephemeral nodes behind until
    they expire while the chroot is being deleted."""
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
