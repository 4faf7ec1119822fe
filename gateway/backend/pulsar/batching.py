"""Whether the gateway's producers may batch, given what the broker can acknowledge.

A Pulsar batch is one entry holding several messages. AMQP settles messages one at a time,
so a batch is only safe when the broker keeps acknowledgements per batch index
(``acknowledgmentAtBatchIndexLevelEnabled``, PIP-54):

* **on**: consumers send per-index acknowledgements (``batch_index_ack_enabled``), the broker
  stores them in the cursor and, when it dispatches an entry again (a consumer closed, a
  connection was re-established), tells the client which indexes to skip. An acknowledged
  message is never delivered again, on any replica.
* **off** (Pulsar's default, and the local stack's): the broker knows entries only. A message
  acknowledged inside a batch comes back whenever its entry is dispatched again, and a
  consumer must not send per-index acknowledgements at all: the broker would take one for the
  whole entry (``Consumer.individualAckNormal`` ignores the ack set then), losing the rest.
  So the gateway's producers write one message per entry, whatever ``amqpBatchingEnabled``
  says, and say so in the log once.

The setting is read from the broker (``/admin/v2/brokers/configuration/runtime``, a
super-user call). When it cannot be read, batching is treated as unsafe.

Requeueing one message of a batch (``basic.reject``/``basic.nack``/``basic.recover``) is
handled in ``delivery.py`` either way: Pulsar's negative acknowledgement would send the whole
entry back.
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
    return BatchSettlement(broker_tracks_indexes=tracks, producers_batch=wanted and tracks)


async def batch_settlement(admin: PulsarAdmin, wanted: bool) -> BatchSettlement:
    """Ask the broker, and decide (logging when batching is turned off for safety)."""
    tracks: bool | None
    try:
        configuration = await admin.broker_configuration()
        value = configuration.get(BROKER_KEY)
        tracks = None if value is None else value.strip().lower() == "true"
    except AdminError as error:
        log.info("cannot read the broker's %s (%s)", BROKER_KEY, error)
        tracks = None
    settlement = settlement_for(wanted, tracks)
    if wanted and not settlement.producers_batch:
        log.warning(
            "amqpBatchingEnabled=true, but the broker's %s is %s: producers do not batch, so "
            "that each AMQP message can be acknowledged and requeued on its own "
            "(docs/compatibility.md)",
            BROKER_KEY,
            "unknown" if tracks is None else "false",
        )
    return settlement
