"""How the gateway's producers batch and its consumers acknowledge, given the broker.

A Pulsar batch is one entry holding several messages: Pulsar then writes, stores and dispatches
one entry where it would have handled each message. AMQP settles messages one at a time, so
what the broker can acknowledge (``acknowledgmentAtBatchIndexLevelEnabled``, PIP-54) decides
how a consumer settles a message that shares its entry:

* **on**: consumers send per-index acknowledgements (``batch_index_ack_enabled``), the broker
  stores them in the cursor and, when it dispatches an entry again (a consumer closed, a
  connection was re-established), tells the client which indexes to skip.
* **off** (Pulsar's default, and the local stack's): the broker knows entries only, and a
  consumer must not send per-index acknowledgements (the broker would take one for the whole
  entry: ``Consumer.individualAckNormal`` ignores the ack set then). pulsar-client keeps the
  acknowledgements of an entry's messages and acknowledges the entry once all are. A message
  requeued from a batch is moved by copy (delivery.py), and a consumer that closes after
  delivering part of a batch first moves the rest of it (split_batches.py), so a settled
  message is not dispatched again. Only a replica that dies without closing its consumers
  leaves entries settled in part: the broker dispatches them again whole, acknowledged
  messages with them (duplicates, never a loss; docs/reliability.md).

So producers batch whenever ``amqpBatchingEnabled`` says so, and the broker's setting (read
from ``/admin/v2/brokers/configuration/runtime``, a super-user call; treated as off when it
cannot be read) decides only how consumers acknowledge.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.errors import AdminError

log = logging.getLogger("gateway.pulsar.batching")

BROKER_KEY = "acknowledgmentAtBatchIndexLevelEnabled"


@dataclass(frozen=True)
class BatchSettlement:
    # The broker stores acknowledgements per batch index (and consumers must send them so).
    broker_tracks_indexes: bool
    # The gateway's producers batch.
    producers_batch: bool


def settlement_for(wanted: bool, broker_tracks_indexes: bool | None) -> BatchSettlement:
    """``wanted``: amqpBatchingEnabled; ``broker_tracks_indexes``: the broker's setting, None
    when unknown (treated as off)."""
    tracks = broker_tracks_indexes is True
    return BatchSettlement(broker_tracks_indexes=tracks, producers_batch=wanted)


async def batch_settlement(admin: PulsarAdmin, wanted: bool) -> BatchSettlement:
    """Ask the broker, and decide (logging how batched messages are settled)."""
    tracks: bool | None
    try:
        configuration = await admin.broker_configuration()
        value = configuration.get(BROKER_KEY)
        tracks = None if value is None else value.strip().lower() == "true"
    except AdminError as error:
        log.info("cannot read the broker's %s (%s)", BROKER_KEY, error)
        tracks = None
    settlement = settlement_for(wanted, tracks)
    if wanted and not tracks:
        log.info(
            "the broker's %s is %s: batched messages are settled one by one by the gateway "
            "(a requeue moves a copy); a replica that dies mid-batch leaves its entry to be "
            "dispatched again whole (docs/reliability.md)",
            BROKER_KEY,
            "unknown" if tracks is None else "false",
        )
    return settlement
