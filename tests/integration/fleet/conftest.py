"""Fixtures of the fleet tests: a fresh namespace, and real gateway processes on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fleet import SESSION_TIMEOUT_MS, Fleet
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import fresh_namespace
from tests.support.thread_replicas import two_replicas
from tests.support.zookeeper import kazoo_client


@pytest.fixture
def namespace(pulsar_stack: Any) -> Iterator[str]:
    """``public/<name>``'s short name, the vhost ``/`` of every gateway a test starts
    (fresh_namespace removes its metadata from ZooKeeper afterwards, so that later gateways
    do not find it)."""
    with fresh_namespace(pulsar_stack) as name:
        yield name


@pytest.fixture
def chroot(pulsar_stack: Any) -> Iterator[str]:
    """``configurationStoreServers`` for a ZooKeeper namespace of this test's own: replicas of
    other test runs on the shared ZooKeeper then neither lead nor touch this test's vhosts."""
    path = f"/fleet-test-{uuid.uuid4().hex[:12]}"
    with kazoo_client(pulsar_stack.zookeeper) as client:
        client.ensure_path(path)
        yield pulsar_stack.zookeeper + path
        client.delete(path, recursive=True)


@pytest.fixture
def fleet(tmp_path: Path, pulsar_stack: Any, namespace: str) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, pulsar_stack, namespace)
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def short_session_fleet(
    tmp_path: Path, pulsar_stack: Any, namespace: str, chroot: str
) -> Iterator[Fleet]:
    """A fleet whose replicas have a short ZooKeeper session (a killed one's ephemeral records
    go within seconds), in a chroot of this test's own (no other run's replica leads)."""
    fleet = Fleet(
        tmp_path,
        pulsar_stack,
        namespace,
        zookeeper=chroot,
        extra_config=f"zooKeeperSessionTimeoutMs={SESSION_TIMEOUT_MS}\n",
    )
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def replicas(pulsar_stack: Any) -> Iterator[tuple[GatewayInThread, GatewayInThread]]:
    """Two replicas in threads of this process, on a fresh namespace."""
    with two_replicas(pulsar_stack) as pair:
        yield pair
