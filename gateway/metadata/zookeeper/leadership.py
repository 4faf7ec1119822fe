"""Leader election per namespace: ZooKeeper's recipe of ephemeral sequential znodes.

Each candidate creates ``leader/c_<sequence>`` (ephemeral, so it goes with the session); the
lowest sequence leads, and every other candidate watches only the one just before it, so a
leader's exit wakes one replica rather than the whole fleet (no herd effect). A leader stops
leading as soon as its connection is suspended: the session may be expiring, and another
replica may take over before this one hears of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio
from kazoo.exceptions import NoNodeError

from gateway.metadata.kazoo_session import KazooSession
from gateway.metadata.values import MetadataUnavailable
from gateway.metadata.zookeeper.calls import ATTEMPTS, KazooCalls, nothing, too_many_races, value
from gateway.metadata.zookeeper.ops import Create

log = logging.getLogger(__name__)

# Candidates are "c_<sequence>"; anything else in the folder is not a candidate.
CANDIDATE_PREFIX: Final = "c_"


class Leadership:
    """Stands this replica for leader of namespaces and says who leads one."""

    def __init__(self, session: KazooSession, calls: KazooCalls, replica_id: str) -> None:
        self._session = session
        self._calls = calls
        self._replica_id = replica_id

    async def lead(self, namespace: str, task: Callable[[], Awaitable[None]]) -> None:
        """Run ``task`` whenever this replica leads ``namespace``, until closed (or the
        namespace is deleted); stand again after every lost session."""
        session = self._session
        await session.connect()
        path = self._calls.layout.leader(namespace)
        while not session.closed:
            await session.wait_connected()
            if session.closed:
                return
            try:
                me = await self._stand(namespace, path)
            except MetadataUnavailable as error:
                log.warning("metadata: cannot stand for leader of %s: %s", namespace, error)
                with trio.move_on_after(1.0):
                    await session.wait_connected(False)
                continue
            if me is None:
                log.info("metadata: namespace %s was deleted; not standing for leader", namespace)
                return
            try:
                await self._candidacy(namespace, path, me, task)
            finally:
                with trio.CancelScope(shield=True):
                    if session.connected:
                        with contextlib.suppress(MetadataUnavailable):
                            await self._calls.delete_if_there(f"{path}/{me}", "stand down")

    async def leader_of(self, namespace: str) -> str | None:
        """The replica id of the current leader (None: no candidate)."""
        what = f"find the leader of {namespace!r}"
        await self._calls.prepare(what)
        path = self._calls.layout.leader(namespace)
        for candidate in await self._candidates(path, what):
            document = await self._calls.read_data(f"{path}/{candidate}", what)
            if document is not None:
                replica = json.loads(document[0]).get("replica")
                return str(replica) if replica is not None else None
        return None

    async def replicas(self, namespace: str) -> set[str]:
        """The replica ids of every candidate: the replicas that have the namespace open."""
        what = f"list the replicas of {namespace!r}"
        await self._calls.prepare(what)
        path = self._calls.layout.leader(namespace)
        replicas = set()
        for candidate in await self._candidates(path, what):
            document = await self._calls.read_data(f"{path}/{candidate}", what)
            if document is not None:
                replica = json.loads(document[0]).get("replica")
                if replica is not None:
                    replicas.add(str(replica))
        return replicas

    async def _candidates(self, path: str, what: str) -> list[str]:
        """The candidates in the order they lead (ZooKeeper's sequence numbers have a fixed
        width, so names sort as the numbers do)."""
        children = await self._calls.children(path, what)
        return sorted(c for c in children if c.startswith(CANDIDATE_PREFIX))

    async def _stand(self, namespace: str, path: str) -> str | None:
        """Create this session's candidate node; its name (None: the namespace is gone, and
        is not created again for an election)."""
        what = f"stand for leader of {namespace!r}"
        data = json.dumps({"v": 1, "replica": self._replica_id}).encode()
        client = self._calls.client

        def apply(result: Any) -> str:
            return str(value(result, what)).rsplit("/", 1)[-1]

        for _ in range(ATTEMPTS):
            try:
                return await self._calls.ask(
                    lambda: client.create_async(
                        f"{path}/{CANDIDATE_PREFIX}", data, ephemeral=True, sequence=True
                    ),
                    apply,
                    what,
                )
            except NoNodeError:
                # The folder is missing (a namespace written by an older version), or the
                # whole namespace was deleted: create the folder only under an existing node.
                failure = await self._calls.transact(what, [Create(path)], nothing)
                if failure is not None and isinstance(failure[1], NoNodeError):
                    return None
        raise too_many_races(what)

    async def _candidacy(
        self, namespace: str, path: str, me: str, task: Callable[[], Awaitable[None]]
    ) -> None:
        """Wait for our turn, lead while connected; return when our node is gone (the session
        ended) so that the caller stands again."""
        session = self._session
        what = f"wait to lead {namespace!r}"
        while not session.closed:
            if not session.connected:
                await session.wait_connected()
                continue
            try:
                candidates = await self._candidates(path, what)
            except MetadataUnavailable:
                continue
            if me not in candidates:
                return  # our session expired with our node
            position = candidates.index(me)
            if position == 0:
                await self._lead_while_connected(namespace, task)
                continue
            await self._watch_gone(f"{path}/{candidates[position - 1]}", what)

    async def _lead_while_connected(
        self, namespace: str, task: Callable[[], Awaitable[None]]
    ) -> None:
        log.info("leader: this replica (%s) now leads namespace %s", self._replica_id, namespace)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(task)
            await self._session.wait_connected(False)
            nursery.cancel_scope.cancel()
        if not self._session.closed:
            log.warning(
                "leader: ZooKeeper connection lost; this replica stops leading namespace "
                "%s until it is back",
                namespace,
            )

    async def _watch_gone(self, path: str, what: str) -> None:
        """Until ``path`` is deleted (or the connection changes: then look again)."""
        gone = trio.Event()

        def watcher(event: Any) -> None:  # kazoo's watch thread
            self._session.notify(gone.set)

        changed = self._session.connection_changed
        client = self._calls.client

        def apply(result: Any) -> bool:
            return value(result, what) is not None

        try:
            exists = await self._calls.ask(
                lambda: client.exists_async(path, watch=watcher), apply, what
            )
        except MetadataUnavailable:
            return
        if not exists:
            return
        async with trio.open_nursery() as nursery:

            async def wait(event: trio.Event) -> None:
                await event.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(wait, gone)
            nursery.start_soon(wait, changed)
