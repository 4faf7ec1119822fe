"""How many messages the broker holds for a queue, counted as AMQP counts them.

Pulsar's backlog counts batch entries, not messages: the broker is asked to analyze the
backlog of each topic the queue reads. The vhost takes off what its own clients hold
unacknowledged (vhost.py ``_message_count``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

from gateway.backend.pulsar.reply_codes import to_amqp_error
from gateway.backend.pulsar.resources import PulsarResources
from gateway.model.naming import subscription_for
from gateway.pulsar.errors import ClosedError, NotFound, PulsarClientError

log = logging.getLogger("gateway.pulsar.vhost")


async def flush_writes(resources: PulsarResources, topics: Iterable[str]) -> None:
    """Wait until the messages this replica is still writing to ``topics`` are stored.

    RabbitMQ handles a channel's methods in order, so a count (Queue.Declare-Ok, purge,
    delete if-empty) right after a publish includes the message even before its confirm;
    Pulsar's backlog does not show it until the write completes."""
    producers = resources.producers
    for topic in topics:
        try:
            # Both of its producers (a large message has one of its own: producer_cache.py),
            # each done once every earlier send of its completed.
            await producers.flush(topic)
        except (ClosedError, PulsarClientError) as error:
            log.debug("flush before counting %s: %s", topic, error)


async def broker_ready_count(
    resources: PulsarResources, topics: Collection[str], queue: str, *, reader: str | None = None
) -> int:
    """The messages of ``queue``'s subscription on ``topics`` not yet acknowledged, after
    this replica's writes in flight are stored. With ``reader`` (a consumer's name): less
    those Pulsar dispatched to the subscription's other consumers, on any replica, which
    that reader cannot expect to read (a new reader of a priority queue reads the rest
    before its first delivery: delivery.py ``filled``)."""
    total = 0
    subscription = subscription_for(queue)
    admin = resources.admin
    await flush_writes(resources, topics)
    for topic in topics:
        try:
            stats = await admin.topic_stats(topic)
        except NotFound:
            # A topic that does not exist holds nothing: a publisher registered its key and
            # has not created it yet (or could not: Pulsar refusing new topics after an
            # outage). Answering 404 made the queue impossible to declare or delete.
            continue
        except Exception as error:
            raise to_amqp_error(error, f"counting '{queue}'") from None
        found = stats.subscriptions.get(subscription)
        if found is None or found.msg_backlog == 0:
            continue
        claimed = 0
        if reader is not None:
            claimed = sum(c.unacked_messages for c in found.consumers if c.name != reader)
        try:
            analysis = await admin.analyze_backlog(topic, subscription)
        except NotFound:
            continue  # removed since the stats were read (the leader's cleaner)
        except Exception as error:
            raise to_amqp_error(error, f"counting '{queue}'") from None
        total += max(0, analysis.messages_in(found.msg_backlog) - claimed)
    return total
