"""``open_authorization``: what the command wires in when authorizationEnabled=true."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.auth.authorization import AuthorizingBackend, open_authorization
from gateway.backend.memory import MemoryBackend
from gateway.metadata.permissions import ZooKeeperPermissionStore
from gateway.metadata.store import MetadataUnavailable
from gateway.model.vhost import VhostMapper
from tests.conftest import StackEndpoints
from tests.support.zookeeper import delete_tree, unique_prefix

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix(pulsar_stack: StackEndpoints) -> Iterator[str]:
    name = unique_prefix()
    yield name
    delete_tree(pulsar_stack.zookeeper, name)


async def test_loaded_before_the_block_and_kept_current(
    pulsar_stack: StackEndpoints, prefix: str
) -> None:
    async with ZooKeeperPermissionStore(pulsar_stack.zookeeper, prefix=prefix) as writer:
        await writer.set("acme/default", "alice", ".*", ".*", ".*")
        async with open_authorization(
            MemoryBackend(VhostMapper("acme")),
            zookeeper=pulsar_stack.zookeeper,
            session_timeout=10,
            superusers=["root"],
            mapper=VhostMapper("acme"),
            prefix=prefix,
        ) as backend:
            assert isinstance(backend, AuthorizingBackend)
            await backend.open_vhost("/", "alice")  # no waiting: loaded before the block
            await backend.open_vhost("/", "root")
            with pytest.raises(AMQPError) as refused:
                await backend.open_vhost("/", "bob")
            assert refused.value.reply_code == ReplyCode.NOT_ALLOWED


async def test_unreachable_zookeeper_is_a_plain_error(prefix: str) -> None:
    # Port 1: nothing listens; the error is raised as such (not in an exception group), so
    # the command can print it as one line.
    with pytest.raises(MetadataUnavailable, match="cannot connect to ZooKeeper"):
        async with open_authorization(
            MemoryBackend(),
            zookeeper="127.0.0.1:1",
            session_timeout=10,
            superusers=[],
            mapper=VhostMapper(),
            prefix=prefix,
            connect_timeout=1,
        ):
            raise AssertionError("not reached")
