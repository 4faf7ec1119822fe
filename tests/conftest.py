"""Shared pytest fixtures.

`pulsar_stack` gives integration tests the real local stack (Apache Pulsar standalone with its
ZooKeeper, see docs/local-stack.md). It is started once per test session, only if a test asks for
it, and stopped at the end only if this session started it: `make test` leaves the machine as it
found it, and a stack started by `make stack-up` stays up.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from tests.support.stack_script import load_stack_module

REPO_DIR = Path(__file__).resolve().parent.parent

# Every gateway a test starts as a process serves its metrics on a free loopback port, unless
# the test says otherwise: the default (0.0.0.0:15692) would collide between gateways run at
# the same time (STARLIGHT_<key> overrides the configuration file).
os.environ.setdefault("STARLIGHT_metricsListener", "http://127.0.0.1:0")


class StackEndpoints(Protocol):
    """What `pulsar_stack` yields (scripts/stack.py's `Endpoints`)."""

    @property
    def broker_url(self) -> str: ...  # pulsar://127.0.0.1:6650
    @property
    def web_url(self) -> str: ...  # http://127.0.0.1:8080 (admin REST API)
    @property
    def zookeeper(self) -> str: ...  # 127.0.0.1:2181


@pytest.fixture(scope="session")
def pulsar_stack() -> Iterator[StackEndpoints]:
    """The stack's endpoints: `.broker_url`, `.web_url`, `.zookeeper`."""
    stack = load_stack_module()
    started_here: bool = stack.ensure_up()
    try:
        endpoints: StackEndpoints = stack.ENDPOINTS
        yield endpoints
    finally:
        if started_here:
            stack.down()
