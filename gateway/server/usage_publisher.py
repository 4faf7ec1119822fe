"""Publishes this replica's usage events to Pulsar (``usageEventsEnabled``).

Every ``usageEventsIntervalSeconds`` the windows of ``observability/usage.py`` are cut and the
events sent, in order, to ``usageEventsTopic``:

- with a Pulsar JSON schema whose definition is ``usage_event.AVRO_SCHEMA`` (the producer
  declares it on the topic: ``pulsar-admin schemas get`` shows typed fields);
- with producer deduplication: the namespace's deduplication policy is turned on, the producer
  is named after the replica (unique per process start), and each event's sequence number (+1)
  is its Pulsar sequence id, so a send retried after a timeout that did reach the broker is
  dropped by the broker instead of counted twice;
- an event that could not be sent stays first in line and is sent again, unchanged, next
  interval; no new window is cut meanwhile, so the counts of an outage carry over to the first
  window after it.

Sending is a few small messages per interval: the synchronous client API on a worker thread is
simpler than the callback bridge and costs nothing that matters.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import trio

from gateway.observability.usage import UsageWindows
from gateway.observability.usage_event import AVRO_SCHEMA, UsageEvent
from gateway.pulsar.admin import PulsarAdmin
from gateway.pulsar.client import PulsarClient
from gateway.pulsar.errors import Conflict

log = logging.getLogger("gateway.usage")

__all__ = ["UsagePublisher", "usage_schema"]

SEND_TIMEOUT_MS = 10_000


def usage_schema() -> Any:
    """A pulsar-client JSON schema for :class:`UsageEvent` with our Avro definition."""
    import _pulsar
    from pulsar.schema import Schema

    class UsageEventSchema(Schema):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(UsageEvent, _pulsar.SchemaType.JSON, AVRO_SCHEMA, "JSON")

        def encode(self, obj: UsageEvent) -> bytes:
            self._validate_object_type(obj)
            return obj.to_json()

        def decode(self, data: bytes) -> UsageEvent:
            return UsageEvent.from_json(data)

    return UsageEventSchema()


class UsagePublisher:
    def __init__(
        self,
        windows: UsageWindows,
        client: PulsarClient,
        admin: PulsarAdmin,
        topic: str,
        interval: float,
    ) -> None:
        self._windows = windows
        self._client = client
        self._admin = admin
        self._topic = topic
        self._interval = interval
        self._pending: deque[UsageEvent] = deque()
        self._producer: Any = None
        self._warned = False
        self._prepared = False  # the namespace exists, with deduplication on

    async def run(self) -> None:
        try:
            while True:
                await trio.sleep(self._interval)
                await self.tick()
        finally:
            with trio.CancelScope(shield=True):
                await self._close()

    async def tick(self) -> None:
        """Cut a window (unless events still wait) and send what waits, oldest first."""
        try:
            if not self._pending:
                self._pending.extend(self._windows.cut(int(time.time() * 1000)))
            if not self._pending:
                return
            producer = await self._ensure_producer()
            while self._pending:
                event = self._pending[0]
                await trio.to_thread.run_sync(_send, producer, event, abandon_on_cancel=True)
                self._pending.popleft()
                self._windows.counters.usage_events_published += 1
            self._warned = False
        except Exception as error:
            self._windows.counters.usage_event_failures += 1
            # One line per outage, not one per interval.
            level = logging.DEBUG if self._warned else logging.WARNING
            log.log(
                level,
                "usage events not published (%d waiting; kept for the next window): %s",
                len(self._pending),
                error,
            )
            self._warned = True
            # A fresh producer next time (a closed or fenced one never recovers). The same
            # name keeps the broker's deduplication state: the resent event is still known.
            await self._close()

    async def _ensure_producer(self) -> Any:
        if self._producer is None:
            if not self._prepared:
                await self._prepare_namespace()
                self._prepared = True
            wrapper = self._client.wrapper
            self._producer = await trio.to_thread.run_sync(
                lambda: wrapper.create_producer(
                    self._topic,
                    producer_name=self._windows.replica,
                    schema=usage_schema(),
                    send_timeout_millis=SEND_TIMEOUT_MS,
                    batching_enabled=False,
                ),
                abandon_on_cancel=True,
            )
        return self._producer

    async def _prepare_namespace(self) -> None:
        """Create the topic's namespace if missing and turn deduplication on there."""
        tenant, namespace = self._topic.split("://", 1)[1].split("/")[:2]
        try:
            if not await self._admin.namespace_exists(tenant, namespace):
                await self._admin.create_namespace(tenant, namespace)
        except Conflict:
            pass  # another replica created it meanwhile
        await self._admin.request(
            "POST", f"/admin/v2/namespaces/{tenant}/{namespace}/deduplication", body=True
        )

    async def _close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await trio.to_thread.run_sync(producer.close, abandon_on_cancel=True)
            except Exception as error:  # closing at shutdown: nothing left to do about it
                log.debug("closing the usage-event producer: %s", error)


def pulsar_sequence_id(event: UsageEvent) -> int:
    """The event's Pulsar sequence id: its sequence + 1, because pulsar-client's Python
    ``send`` ignores a sequence id of 0 (it tests it for truth) and numbers that message
    itself, which would break deduplication of a retried first event."""
    return event.sequence + 1


def _send(producer: Any, event: UsageEvent) -> None:
    producer.send(event, sequence_id=pulsar_sequence_id(event))
