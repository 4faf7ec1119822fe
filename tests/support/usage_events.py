"""Usage events produced straight to Pulsar, as the gateway's replicas will: a JSON schema of
the contract's Avro definition declared on the topic (so a reader works against a schema'd
topic, as in production), one JSON object per message."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pulsar

from gateway.observability.usage_event import UsageEvent
from gateway.server.usage_publisher import usage_schema


def event(
    number: int,
    *,
    vhost: str,
    start_ms: int,
    replica: str = "r1",
    length_ms: int = 10_000,
    namespace: str | None = None,
    **counters: int,
) -> UsageEvent:
    """Event ``<replica>:<number>`` covering ``[start_ms, start_ms + length_ms)``."""
    return UsageEvent(
        event_id=f"{replica}:{number}",
        replica=replica,
        sequence=number,
        vhost=vhost,
        namespace=namespace or f"public/{vhost.strip('/') or 'default'}",
        window_start_ms=start_ms,
        window_end_ms=start_ms + length_ms,
        **counters,
    )


class EventProducer:
    """Two producers on one topic: the schema'd one for events, a plain one for garbage."""

    def __init__(self, service_url: str, topic: str) -> None:
        self.client: Any = pulsar.Client(service_url, logger=pulsar.ConsoleLogger(_ERROR_ONLY))
        self.events = self.client.create_producer(
            topic, schema=usage_schema(), batching_enabled=False
        )
        self._raw: Any = None
        self._batching: Any = None
        self.topic = topic

    def send(self, events: Iterable[UsageEvent]) -> None:
        for item in events:
            self.events.send(item)

    def send_batch(self, events: Iterable[UsageEvent]) -> None:
        """``events`` in one batched entry: a reader sees all of them or none yet."""
        if self._batching is None:
            self._batching = self.client.create_producer(
                self.topic,
                schema=usage_schema(),
                batching_enabled=True,
                batching_max_messages=1000,
                batching_max_publish_delay_ms=60_000,
            )
        for item in events:
            self._batching.send_async(item, None)
        self._batching.flush()

    def send_raw(self, payload: bytes) -> str:
        """A payload without the schema (allowed: the namespace does not enforce schemas);
        returns its message id as ``ledger:entry:batch``."""
        if self._raw is None:
            self._raw = self.client.create_producer(self.topic, batching_enabled=False)
        message_id = self._raw.send(payload)
        return f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.batch_index()}"

    def close(self) -> None:
        self.client.close()


_ERROR_ONLY = pulsar.LoggerLevel.Error
