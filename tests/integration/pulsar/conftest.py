"""Fixtures for the Pulsar layer's integration tests: each test gets its own namespace.

``namespace`` is ``public/t-<uuid8>``, created before the test and deleted (with every topic in
it) afterwards, so tests neither see nor leak each other's topics and subscriptions.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import trio

from gateway.pulsar import compiled
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import ClientOptions, PulsarClient
from tests.conftest import StackEndpoints
from tests.support.compiled_modules import require_built

TENANT = "public"


@pytest.fixture(params=["compiled", "binding"])
def both_paths(request: pytest.FixtureRequest) -> str:
    """For tests of TrioConsumer and TrioProducer (``usefixtures``): their ``client`` uses the
    compiled module (gateway/pulsar/compiled.py), then pulsar-client's binding alone."""
    if request.param == "compiled":
        require_built(compiled.load(), "the compiled module")
    return str(request.param)


@pytest.fixture
async def admin(pulsar_stack: StackEndpoints) -> AsyncIterator[PulsarAdmin]:
    async with PulsarAdmin(pulsar_stack.web_url, timeout=10, retries=2) as client:
        yield client


@pytest.fixture
async def namespace(admin: PulsarAdmin) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    assert await admin.create_namespace(TENANT, name)
    try:
        yield f"{TENANT}/{name}"
    finally:
        with trio.CancelScope(shield=True):
            await admin.delete_namespace(TENANT, name, force=True)


@pytest.fixture
async def client(
    pulsar_stack: StackEndpoints, namespace: str, request: pytest.FixtureRequest
) -> AsyncIterator[PulsarClient]:
    # Depends on `namespace` so that it is closed before the namespace is deleted.
    binding_only = (
        "both_paths" in request.fixturenames and request.getfixturevalue("both_paths") == "binding"
    )
    options = ClientOptions(
        service_url=pulsar_stack.broker_url,
        operation_timeout_seconds=15,
        compiled=not binding_only,
    )
    async with await PulsarClient.create(options) as pulsar_client:
        yield pulsar_client


# What the ``topic`` fixture gives: a short topic name -> the full name in the test's namespace.
Topic = Callable[[str], str]


@pytest.fixture
def topic(namespace: str) -> Topic:
    """``topic("x")`` → ``persistent://public/t-…/x``."""

    def make(local: str) -> str:
        return f"persistent://{namespace}/{local}"

    return make


async def wait_for(
    condition: Callable[[], Awaitable[bool]], *, timeout: float = 10.0, interval: float = 0.05
) -> None:
    """Poll an async condition until it holds; fail the test after ``timeout`` seconds."""
    with trio.fail_after(timeout):
        while not await condition():
            await trio.sleep(interval)
