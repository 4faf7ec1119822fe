"""The metadata store on ZooKeeper (kazoo), with per-namespace views kept current by watches.

docs/metadata.md describes the layout, the encoding, what is atomic and the fault behaviour;
this docstring says how the code is arranged. One session (``kazoo_session.KazooSession``,
shared in kind with the permission store) carries everything; the parts:

- ``store.py`` — ``ZooKeeperMetadataStore``: lifecycle and views; every other
  method of the roles (``gateway/metadata/roles.py``) is one of the modules below's own,
  named with ``served_by`` (docs/metadata.md, "Roles", says which serves which role);
- ``calls.py`` — requests issued from trio whose answers are applied in server order, and the
  transaction operations (``Create``, ``Delete``, …) with the compare-and-set retry helper;
- ``watcher.py`` — the watch-driven listing that feeds each namespace's ``mirror.py``, and the
  resync after a reconnect;
- ``synced_reads.py`` — the ``sync_*`` reads and ``list_namespaces``, after a sync;
- ``transactions.py`` — creating entities, binding, topic keys, consumers, drain records;
- ``exchange_bindings.py`` — binding and unbinding exchanges to exchanges (Exchange.Bind);
- ``deletes.py`` — deleting a queue or an exchange with its bindings and records;
- ``lines.py`` — the lines of single-active-consumer queues;
- ``leadership.py`` — leader election per namespace;
- ``deliveries.py`` — each replica's delivery record, followed by the others;
- ``reclaim.py`` — claiming this replica's ephemeral records again after a session expired;
- ``admin.py`` — bulk import and deleting a whole namespace.

**Threads.** Nothing runs on kazoo's threads but a hand-over to trio (``KazooSession.notify``);
every kazoo call is made from the trio thread, so the order in which requests are issued is
the order in which the server sees them (calls.py explains why that order matters).
"""

from gateway.metadata.zookeeper.store import ZooKeeperMetadataStore

__all__ = ["ZooKeeperMetadataStore"]
