"""Claiming this replica's ephemeral records again after its ZooKeeper session expired.

Exclusive queues' owner records and consumer records are ephemeral znodes of the session that
wrote them: ZooKeeper deletes them when the session ends, which is how the fleet learns that a
replica died (the leader then deletes its exclusive queues, RabbitMQ's "exclusive queues are
deleted when their connection closes"). But a session can also expire while the replica lives
on (a network partition longer than the session timeout); its connections and consumers are
still there, so the new session writes their records again — each only if its queue still
exists (one transaction: check the queue, create the record), since the leader may have
deleted the queue while the session was gone, and a deleted queue must stay deleted.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from gateway.metadata.codec import ConsumerKey, OwnerKey, consumer_from_child
from gateway.metadata.paths import Folder, encode_name
from gateway.metadata.values import MetadataUnavailable
from gateway.metadata.zookeeper.calls import KazooCalls
from gateway.metadata.zookeeper.ops import Check, Create
from gateway.metadata.zookeeper.watcher import NamespaceWatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EphemeralRecord:
    """A record of this session, claimed again by a new session if its queue still exists."""

    namespace: str
    queue: str
    folder: Folder
    child: str
    data: bytes

    def entity(self) -> OwnerKey | ConsumerKey:
        """What the record is in the namespace's view."""
        if self.folder is Folder.OWNERS:
            return OwnerKey(self.queue)
        return consumer_from_child(self.child)


class EphemeralRecords:
    """The owner and consumer records this replica wrote, by path."""

    def __init__(self, calls: KazooCalls, watcher: NamespaceWatcher) -> None:
        self._calls = calls
        self._watcher = watcher
        self._records: dict[str, EphemeralRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, path: str) -> bool:
        return path in self._records

    def track(self, path: str, record: EphemeralRecord) -> None:
        """``record`` was written at ``path`` by this session."""
        self._records[path] = record

    def untrack(self, path: str) -> None:
        """The record at ``path`` was removed on purpose (a consumer cancelled)."""
        self._records.pop(path, None)

    def untrack_queue(self, namespace: str, queue: str) -> None:
        """The queue is gone, and its records with it: nothing of it to claim again."""
        for path, record in list(self._records.items()):
            if record.namespace == namespace and record.queue == queue:
                del self._records[path]

    def claim_again(self) -> None:
        """A new session: create every record again, each only if its queue still exists.

        Issued at once (from the reconnect callback, which cannot await); each answer is
        applied to the view on arrival, and a refused claim is forgotten."""
        if self._records:
            log.info(
                "metadata: new ZooKeeper session; claiming %d owner and consumer record(s) again",
                len(self._records),
            )
        layout = self._calls.layout
        for path, record in list(self._records.items()):
            queue_path = layout.node(record.namespace, Folder.QUEUES, encode_name(record.queue))

            def claimed(record: EphemeralRecord = record) -> None:
                entity = record.entity()
                self._watcher.own(
                    record.namespace, lambda m: m.own_created(record.folder, record.child, entity)
                )

            def refused(index: int, error: Exception, path: str = path) -> None:
                log.warning("metadata: could not claim %s again: %s", path, type(error).__name__)
                self._records.pop(path, None)

            # Unavailable again already: the next new session claims them.
            with contextlib.suppress(MetadataUnavailable):
                self._calls.submit_transaction(
                    f"claim {path} again",
                    [Check(queue_path), Create(path, record.data, ephemeral=True)],
                    claimed,
                    refused,
                )
