"""Producers batch as amqpBatchingEnabled says; the broker's batch-index setting decides how
consumers acknowledge."""

from __future__ import annotations

import httpx
import pytest

from gateway.backend.pulsar.batching import BROKER_KEY, batch_settlement, settlement_for
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.retry import RetryPolicy


@pytest.mark.parametrize(
    ("wanted", "broker", "tracks", "batch"),
    [
        (True, True, True, True),
        (True, False, False, True),  # settled one by one by the gateway (batching.py)
        (True, None, False, True),  # unknown: treated as off
        (False, True, True, False),  # per-index acks still on: native producers batch too
        (False, False, False, False),
    ],
)
def test_settlement_for(wanted: bool, broker: bool | None, tracks: bool, batch: bool) -> None:
    settlement = settlement_for(wanted, broker)
    assert (settlement.broker_tracks_indexes, settlement.producers_batch) == (tracks, batch)


def admin_answering(status: int, body: object) -> PulsarAdmin:
    def reply(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/admin/v2/brokers/configuration/runtime"
        return httpx.Response(status, json=body)

    policy = RetryPolicy(retries=1, timeout=1.0, base_delay=0.01, jitter=0.0)
    return PulsarAdmin("http://broker:8080", policy=policy, transport=httpx.MockTransport(reply))


@pytest.mark.parametrize(
    ("status", "body", "tracks"),
    [
        (200, {BROKER_KEY: "true", "other": "1"}, True),
        (200, {BROKER_KEY: "false"}, False),
        (200, {"other": "1"}, False),  # an older broker without the key
        (403, {"reason": "not a super-user"}, False),
    ],
)
async def test_batch_settlement_reads_the_broker(status: int, body: object, tracks: bool) -> None:
    async with admin_answering(status, body) as admin:
        settlement = await batch_settlement(admin, wanted=True)
    assert settlement.broker_tracks_indexes is tracks
    assert settlement.producers_batch  # whatever the broker says
