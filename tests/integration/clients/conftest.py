"""One gateway per test module, over the in-memory backend and over the Pulsar backend.

The Pulsar gateway gets a fresh namespace (``public/t-<random>``) for the module; tests inside
a module use unique entity names, so they can share it. Module scope keeps the suite fast: a
Pulsar gateway takes a moment to start, a namespace to create and to delete.

``batch_index_stack`` is a second Pulsar, of the session's own, whose broker keeps
acknowledgements per batch index: the settlement tests run there too (see its docstring).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.backend.memory import MemoryBackend
from gateway.model.vhost import Namespace
from tests.support.clients import connect
from tests.support.gateway_thread import GatewayInThread
from tests.support.own_stack import OwnStack, own_stack
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config

# PIP-54: the broker stores acknowledgements per batch index. Pulsar's default (and the shared
# stack's) is off; only then do the gateway's producers batch (gateway/backend/pulsar/batching.py).
BATCH_INDEX_ACKS = "acknowledgmentAtBatchIndexLevelEnabled=true\n"


@dataclass
class Running:
    gateway: GatewayInThread
    backend: str  # "memory", "pulsar" or "pulsar-batch-index"
    namespace: Namespace | None = None  # the Pulsar namespace of vhost "/"
    broker_url: str = ""
    web_url: str = ""

    @property
    def port(self) -> int:
        return self.gateway.port

    @property
    def pulsar(self) -> bool:
        return self.backend.startswith("pulsar")

    def connect(self, vhost: str = "/") -> pika.BlockingConnection:
        return connect(self.port, vhost)


# For tests that only make sense on Pulsar: @pytest.mark.parametrize("running", [PULSAR_ONLY],
# indirect=True) reuses the module's Pulsar gateway.
PULSAR_ONLY = pytest.param("pulsar", marks=pytest.mark.integration)
# A module that settles messages of batches also runs on batch_index_stack with
# @pytest.mark.parametrize("running", ["memory", PULSAR_ONLY, PULSAR_BATCH_INDEX], indirect=True).
PULSAR_BATCH_INDEX = pytest.param("pulsar-batch-index", marks=pytest.mark.integration)


@pytest.fixture(scope="module", params=["memory", PULSAR_ONLY])
def running(request: pytest.FixtureRequest) -> Iterator[Running]:
    if request.param == "memory":
        with GatewayInThread(backend=MemoryBackend()) as gateway:
            yield Running(gateway, "memory")
        return
    stack = request.getfixturevalue(
        "batch_index_stack" if request.param == "pulsar-batch-index" else "pulsar_stack"
    )
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            yield Running(
                gateway,
                request.param,
                Namespace("public", namespace),
                stack.broker_url,
                stack.web_url,
            )


@pytest.fixture
def connection(running: Running) -> Iterator[pika.BlockingConnection]:
    opened = running.connect()
    yield opened
    if opened.is_open:
        opened.close()


@pytest.fixture
def channel(connection: pika.BlockingConnection) -> BlockingChannel:
    return connection.channel()


@pytest.fixture(scope="session")
def batch_index_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnStack]:
    """A Pulsar standalone with ``acknowledgmentAtBatchIndexLevelEnabled=true``, on free ports
    with its own ZooKeeper (tests/support/own_stack.py), started once for the session when a
    test first asks for it and stopped at its end: the shared stack runs with Pulsar's default
    and is never reconfigured. There the gateway's producers batch and its consumers send
    per-index acknowledgements, a path the shared stack never takes."""
    directory: Path = tmp_path_factory.mktemp("batch-index-pulsar")
    with own_stack(directory, broker_config=BATCH_INDEX_ACKS) as stack:
        yield stack
