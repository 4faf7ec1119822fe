"""One gateway per test module, over the in-memory backend and over the Pulsar backend.

The Pulsar gateway gets a fresh namespace (``public/t-<random>``) for the module; tests inside
a module use unique entity names, so they can share it. Module scope keeps the suite fast: a
Pulsar gateway takes a moment to start, a namespace to create and to delete.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest
from pika.adapters.blocking_connection import BlockingChannel

from gateway.backend.memory import MemoryBackend
from gateway.model.vhost import Namespace
from tests.support.clients import connect
from tests.support.gateway_thread import GatewayInThread
from tests.support.pulsar_gateway import backend_factory, fresh_namespace, stack_config


@dataclass
class Running:
    gateway: GatewayInThread
    backend: str  # "memory" or "pulsar"
    namespace: Namespace | None = None  # the Pulsar namespace of vhost "/"
    broker_url: str = ""
    web_url: str = ""

    @property
    def port(self) -> int:
        return self.gateway.port

    @property
    def pulsar(self) -> bool:
        return self.backend == "pulsar"

    def connect(self, vhost: str = "/") -> pika.BlockingConnection:
        return connect(self.port, vhost)


# For tests that only make sense on Pulsar: @pytest.mark.parametrize("running", [PULSAR_ONLY],
# indirect=True) reuses the module's Pulsar gateway.
PULSAR_ONLY = pytest.param("pulsar", marks=pytest.mark.integration)


@pytest.fixture(scope="module", params=["memory", PULSAR_ONLY])
def running(request: pytest.FixtureRequest) -> Iterator[Running]:
    if request.param == "memory":
        with GatewayInThread(backend=MemoryBackend()) as gateway:
            yield Running(gateway, "memory")
        return
    stack = request.getfixturevalue("pulsar_stack")
    with fresh_namespace(stack) as namespace:
        config = stack_config(stack.web_url, stack.broker_url, stack.zookeeper, namespace)
        with GatewayInThread(backend_factory=backend_factory(config)) as gateway:
            yield Running(
                gateway,
                "pulsar",
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
