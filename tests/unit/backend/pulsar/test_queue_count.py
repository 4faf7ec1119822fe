"""Counting a queue's messages in Pulsar: a topic that does not exist (yet) holds nothing; any
other failure is an AMQP error naming the queue."""

from __future__ import annotations

from typing import Any, cast

import pytest

from gateway.amqp.errors import AMQPError
from gateway.backend.pulsar.queue_count import broker_ready_count
from gateway.backend.pulsar.resources import PulsarResources
from gateway.model.naming import subscription_for
from gateway.pulsar.admin_stats import BacklogAnalysis, SubscriptionStats, TopicStats
from gateway.pulsar.errors import NotFound, Unauthorized

MISSING = "persistent://t/n/amq.default__q"
HOLDING = "persistent://t/n/ex__k"


class Admin:
    """Stats of one topic holding 3 messages of q; ``failure`` raised for every other."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    async def topic_stats(self, topic: str) -> TopicStats:
        if topic != HOLDING:
            raise self.failure
        name = subscription_for("q")
        found = SubscriptionStats(name, 3, 0, "Shared", (), msg_out_counter=0, is_durable=True)
        return TopicStats(0, 0, 0, 0, {name: found}, {})

    async def analyze_backlog(self, topic: str, subscription: str) -> BacklogAnalysis:
        return BacklogAnalysis(3, 3, False)


class Producers:
    """No write of this replica in flight."""

    producers: dict[str, Any] = {}  # noqa: RUF012

    async def flush(self, topic: str) -> None:
        return None


class Resources:
    def __init__(self, admin: Admin) -> None:
        self.admin = admin
        self.producers = Producers()


def resources(failure: Exception) -> PulsarResources:
    return cast(PulsarResources, Resources(Admin(failure)))


async def test_a_topic_not_created_yet_counts_nothing() -> None:
    # Issue 37: a publisher registers its key before it creates the topic (and after an
    # outage Pulsar may refuse to create it for seconds); a declare counting the queue in
    # between answered 404 NOT_FOUND "Topic ... not found", for good if creation had failed.
    missing = NotFound(404, "GET", MISSING, "Topic not found")
    assert await broker_ready_count(resources(missing), [MISSING, HOLDING], "q") == 3


async def test_other_failures_are_amqp_errors_naming_the_queue() -> None:
    refused = Unauthorized(401, "GET", MISSING, "no")
    with pytest.raises(AMQPError, match="counting 'q'"):
        await broker_ready_count(resources(refused), [MISSING, HOLDING], "q")
