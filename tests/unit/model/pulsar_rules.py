"""Pulsar's rules for topic and subscription names, written as checkers from its sources.

- ``NamedEntity.checkName`` (pulsar-common ``org.apache.pulsar.common.naming``): the Java
  pattern ``^[-=:.\\w]*$``, ``\\w`` being ASCII ``[a-zA-Z_0-9]``. ``NamespaceName.getTopicName``
  applies it to local topic names; a name outside it may work on some paths and fail on others.
- ``TopicName``: a non-empty local name; a ``/`` would turn ``tenant/ns/a/b`` into the legacy
  ``tenant/cluster/ns/topic`` form.
- ``TopicName.getPartitionIndex`` (Java: what follows the last ``-partition-``) and the C++
  client's ``getPartitionIndex`` (``stoi`` of what follows the last ``-`` once
  ``-partition-`` occurs): a name containing ``-partition-`` may be taken for a partition.
- ``SystemTopicNames``: ``__change_events``, ``__transaction_buffer_snapshot`` (and newer
  ``__transaction_buffer_snapshot_*``) are system topics, names ending with
  ``__transaction_pending_ack`` are transaction stores; we keep clear of the ``__`` prefix.
- ZooKeeper refuses the path elements ``.`` and ``..`` (the managed ledger and the namespace
  policies live under paths built from these names).
- ``%``: allowed by ``checkName`` "as part of valid URL encoding", but the admin REST API has
  decoded such names twice (apache/pulsar#2910, #18435), so a name of ours never holds one.
- Subscriptions (cursors): the broker's own cursors are ``pulsar.dedup`` and
  ``pulsar.repl.<cluster>`` (``PersistentTopic``: ``replicatorPrefix`` = ``pulsar.repl``) and
  ``__compaction``; a ``/`` in a subscription name breaks the cursor's ZooKeeper path.
"""

from __future__ import annotations

import re

_NAMED_ENTITY = re.compile(r"[-=:.\w]*", re.ASCII)


def local_topic_problem(name: str) -> str | None:
    if not name:
        return "empty"
    if not _NAMED_ENTITY.fullmatch(name):
        return "outside NamedEntity's characters"
    if name in (".", ".."):
        return "ZooKeeper path element"
    if "-partition-" in name:
        return "looks like a partition"
    if name.startswith("__") or name.endswith("__transaction_pending_ack"):
        return "system topic name"
    return None


def subscription_problem(name: str) -> str | None:
    if not name:
        return "empty"
    if not _NAMED_ENTITY.fullmatch(name):
        return "outside NamedEntity's characters"
    if name in (".", ".."):
        return "ZooKeeper path element"
    if name.startswith("pulsar.") or name.startswith("__"):
        return "broker cursor name"
    return None
