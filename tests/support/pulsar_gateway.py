"""A gateway on the real local stack, in its own Pulsar namespace so tests never share state."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any

import httpx
import trio

from gateway.app import pulsar_backend
from gateway.backend.interface import Backend
from gateway.config import GatewayConfig, config_from_text
from gateway.metadata.store import MetadataStore, MetadataUnavailable
from gateway.metadata.zookeeper import ZooKeeperMetadataStore


def stack_config(web_url: str, broker_url: str, zookeeper: str, namespace: str) -> GatewayConfig:
    """A configuration whose default vhost ``/`` is ``public/<namespace>``."""
    return config_from_text(
        f"brokerServiceURL={broker_url}\n"
        f"brokerWebServiceURL={web_url}\n"
        f"configurationStoreServers={zookeeper}\n"
        f"amqpDefaultNamespace={namespace}\n",
        environ={},
    )


@contextmanager
def fresh_namespace(stack: Any) -> Iterator[str]:
    """``namespace_of_its_own`` on the local stack, in tenant ``public``."""
    with (
        httpx.Client(base_url=stack.web_url, timeout=30) as admin,
        namespace_of_its_own(admin, stack.zookeeper, "public") as name,
    ):
        yield name


@contextmanager
def namespace_of_its_own(admin: httpx.Client, zookeeper: str, tenant: str) -> Iterator[str]:
    """Create ``<tenant>/t-<random>`` through ``admin``; afterwards delete it, with everything
    in it and the gateway's metadata of it in ZooKeeper (so later replicas do not load it)."""
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin.put(f"/admin/v2/namespaces/{tenant}/{name}").raise_for_status()
    try:
        yield name
    finally:
        admin.delete(f"/admin/v2/namespaces/{tenant}/{name}", params={"force": "true"})
        forget_metadata_until_gone(zookeeper, f"{tenant}/{name}")


def forget_metadata_until_gone(zookeeper: str, namespace: str, timeout: float = 60.0) -> None:
    """``forget_metadata``, again while it meets a node created since its listing: a gateway
    that starts anywhere on this ZooKeeper (another test, another session) loads every vhost
    and stands for its leader, a candidate znode under the namespace being deleted."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            trio.run(forget_metadata, zookeeper, namespace)
            return
        except MetadataUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # polling interval of a retried cleanup, with a deadline


async def forget_metadata(zookeeper: str, namespace: str) -> None:
    """Drop the gateway's metadata of a deleted namespace (later replicas would load it)."""
    async with ZooKeeperMetadataStore(zookeeper) as store:
        await store.delete_namespace(namespace)


def backend_factory(
    config: GatewayConfig, store: MetadataStore | None = None
) -> Callable[[], AbstractAsyncContextManager[Backend]]:
    @asynccontextmanager
    async def factory() -> AsyncIterator[Backend]:
        async with pulsar_backend(config, store) as backend:
            yield backend

    return factory
