"""calls.py: transactions and small requests on the real ZooKeeper, answers applied in order,
refusals while unreachable, and the compare-and-set retry helper."""

from __future__ import annotations

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from gateway.metadata.paths import Folder
from gateway.metadata.store import MetadataUnavailable
from gateway.metadata.zookeeper.calls import (
    AGAIN,
    ATTEMPTS,
    Again,
    absent,
    nothing,
    retry_races,
    unexpected,
)
from gateway.metadata.zookeeper.ops import Create, Delete, Op
from tests.unit.metadata.conftest import Parts, make_parts

zk = pytest.mark.integration


def test_unexpected_wraps_only_zookeeper_errors() -> None:
    wrapped = unexpected(BadVersionError(), "do it")
    assert isinstance(wrapped, MetadataUnavailable)
    assert str(wrapped) == "ZooKeeper refused to do it: BadVersionError"
    other = ValueError("mine")
    assert unexpected(other, "do it") is other


async def test_retry_races_returns_the_first_real_answer() -> None:
    answers: list[bool | Again] = [AGAIN, AGAIN, False]

    async def attempt() -> bool | Again:
        await trio.lowlevel.checkpoint()
        return answers.pop(0)

    assert await retry_races("do it", attempt) is False
    assert answers == []


async def test_retry_races_gives_up_after_the_attempts() -> None:
    calls = 0

    async def attempt() -> int | Again:
        nonlocal calls
        calls += 1
        await trio.lowlevel.checkpoint()
        return AGAIN

    with pytest.raises(MetadataUnavailable, match=f"changed concurrently {ATTEMPTS} times"):
        await retry_races("bind it", attempt)
    assert calls == ATTEMPTS


@zk
async def test_a_transaction_commits_whole_and_runs_on_success(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.ensure_path(zk_prefix)
    ran: list[str] = []
    ops = [Create(f"{zk_prefix}/a", b"1"), Create(f"{zk_prefix}/b", b"2")]
    failure = await parts.calls.transact("create", ops, lambda: ran.append("ok"))
    assert failure is None and ran == ["ok"]
    assert raw.get(f"{zk_prefix}/a")[0] == b"1" and raw.get(f"{zk_prefix}/b")[0] == b"2"


@zk
async def test_a_failed_transaction_names_the_failing_op_and_changes_nothing(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.ensure_path(f"{zk_prefix}/taken")
    failed: list[tuple[int, type[Exception]]] = []
    ops: list[Op] = [
        Create(f"{zk_prefix}/new"),
        Create(f"{zk_prefix}/taken"),
        Delete(f"{zk_prefix}/none"),
    ]
    failure = await parts.calls.transact(
        "create", ops, nothing, lambda index, error: failed.append((index, type(error)))
    )
    assert failure is not None
    index, error = failure
    # The first op's "rolled back" is not the failure; the second's NodeExists is.
    assert index == 1 and isinstance(error, NodeExistsError)
    assert failed == [(1, NodeExistsError)]
    assert raw.exists(f"{zk_prefix}/new") is None


@zk
async def test_absent_is_a_check_that_a_node_does_not_exist(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.ensure_path(zk_prefix)
    path = f"{zk_prefix}/marker"
    assert await parts.calls.transact("check", absent(path), nothing) is None
    assert raw.exists(path) is None  # nothing left behind
    raw.create(path)
    failure = await parts.calls.transact("check", absent(path), nothing)
    assert failure is not None and failure[0] == 0 and isinstance(failure[1], NodeExistsError)


@zk
async def test_small_requests(parts: Parts, zk_prefix: str, raw: KazooClient) -> None:
    raw.create(f"{zk_prefix}/node", b"data", makepath=True)
    raw.set(f"{zk_prefix}/node", b"data2")
    calls = parts.calls
    assert await calls.read_data(f"{zk_prefix}/node", "read") == (b"data2", 1)
    assert await calls.read_data(f"{zk_prefix}/none", "read") is None
    assert await calls.exists(f"{zk_prefix}/node", "look") is True
    assert await calls.exists(f"{zk_prefix}/none", "look") is False
    assert await calls.children(zk_prefix, "list") == ["node"]
    assert await calls.children(f"{zk_prefix}/none", "list") == []  # missing: no children
    assert await calls.synced_children(zk_prefix, "list") == ["node"]
    await calls.delete_if_there(f"{zk_prefix}/node", "delete")
    await calls.delete_if_there(f"{zk_prefix}/node", "delete")  # gone already: fine
    assert raw.exists(f"{zk_prefix}/node") is None


@zk
async def test_ensure_parents_creates_the_bucket_and_missing_folders(
    parts: Parts, namespace: str, raw: KazooClient
) -> None:
    layout = parts.layout
    queue_path = layout.node(namespace, Folder.QUEUES, "q")
    await parts.calls.ensure_parents(namespace, queue_path, "create")
    for path in layout.skeleton(namespace):
        assert raw.exists(path) is not None, path
    bucket = queue_path.rsplit("/", 1)[0]
    assert raw.exists(bucket) is not None
    assert raw.exists(queue_path) is None  # only the parents
    await parts.calls.ensure_parents(namespace, queue_path, "create")  # idempotent


@zk
async def test_requests_are_refused_at_once_while_unreachable(
    zk_hosts: str, zk_prefix: str
) -> None:
    parts = make_parts(zk_hosts, zk_prefix)
    with pytest.raises(MetadataUnavailable, match="metadata changes are refused until it is back"):
        parts.calls.check_writable("declare queue 'q'")
    await parts.session.connect()
    await parts.session.aclose()
    with pytest.raises(MetadataUnavailable, match="the metadata store is closed"):
        await parts.calls.read_data(zk_prefix, "read")


@zk
async def test_a_missing_node_in_a_read_is_none_not_an_error(parts: Parts, zk_prefix: str) -> None:
    with pytest.raises(NoNodeError):
        # The raw answer is an error; read_data's own apply turns it into None.
        await parts.calls.ask(
            lambda: parts.calls.client.get_async(f"{zk_prefix}/none"),
            lambda result: result.get_nowait(),
            "read",
        )


@zk
async def test_a_request_not_answered_in_time_is_refused_by_the_sweeper(parts: Parts) -> None:
    parts.session.request_timeout = 0.2
    never = parts.calls.client.handler.async_result()  # an answer that never comes
    reply = parts.calls.submit("look", lambda: never, lambda result: result.get_nowait())
    with trio.fail_after(5):
        with pytest.raises(MetadataUnavailable, match=r"did not answer within 0\.2 s"):
            await parts.calls.wait(reply, "look")
    # Later requests are answered as usual (the sweeper came and went).
    assert await parts.calls.exists("/", "look") is True


@zk
async def test_a_cancelled_wait_leaves_the_answer_to_be_applied(
    parts: Parts, zk_prefix: str, raw: KazooClient
) -> None:
    raw.ensure_path(zk_prefix)
    ran: list[str] = []
    reply = parts.calls.submit_transaction(
        "create", [Create(f"{zk_prefix}/late")], lambda: ran.append("applied")
    )
    with trio.move_on_after(0):
        await parts.calls.wait(reply, "create")  # cancelled at once
    assert await parts.calls.exists(f"{zk_prefix}/late", "look") is True
    assert ran == ["applied"]  # applied on arrival, though nobody awaited it
    assert await parts.calls.wait(reply, "create") is None  # and still there to read
