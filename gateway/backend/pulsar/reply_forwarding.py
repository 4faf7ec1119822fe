"""Direct replies between replicas (the names and the local delivery are backend/replies.py's).

A requester's reply name says which replica holds it. Each replica reads its own
non-persistent topic per vhost, ``non-persistent://<tenant>/<namespace>/amq.rabbitmq.reply-to.<replica>``,
from the first reply consumer on; a reply published on another replica is sent there, and
delivered to the requester's channel as a local reply would be. Non-persistent: replies are
at-most-once in RabbitMQ too, nothing is stored, and a replica that is gone leaves no backlog.
No metadata is written: the cost of a reply across replicas is one Pulsar send.
"""

from __future__ import annotations

import logging
import struct

import trio

from gateway.backend.interface import Message
from gateway.backend.pulsar.reply_codes import to_amqp_error
from gateway.backend.replies import REPLY_TO, ReplyRegistry
from gateway.pulsar.consumer import ConsumerOptions, TrioConsumer
from gateway.pulsar.errors import PulsarClientError

from .resources import PulsarResources

log = logging.getLogger("gateway.replies")

_HEADER_SIZE = struct.Struct(">I")
_NAME = "name"  # the Pulsar message property carrying the reply name
_SUBSCRIPTION = "amqp-direct-replies"


class ReplyForwarding:
    """One vhost's side of replies between replicas, on one replica."""

    def __init__(self, resources: PulsarResources, topic_prefix: str) -> None:
        """``topic_prefix``: ``non-persistent://<tenant>/<namespace>/``."""
        self._r = resources
        self._topic_prefix = topic_prefix
        self.registry = ReplyRegistry(forward=self.forward, listen=self.listen)
        self._consumer: TrioConsumer | None = None
        self._subscribing = trio.Lock()

    def topic(self, replica: str) -> str:
        return f"{self._topic_prefix}{REPLY_TO}.{replica}"

    async def forward(self, name: str, message: Message) -> None:
        """Send a reply to the replica its name names; a name no replica generated (or of a
        replica that is gone) reaches no reader and is dropped, as in RabbitMQ."""
        replica = ReplyRegistry.replica_of(name)
        if not replica:
            return
        payload = _HEADER_SIZE.pack(len(message.header)) + message.header + message.body
        try:
            # Not waited for: replies are at-most-once, the publisher is confirmed at once.
            await self._r.producers.submit(self.topic(replica), payload, {_NAME: name})
        except PulsarClientError as error:
            log.warning("direct reply to %s not sent: %s", name, error)

    async def listen(self) -> None:
        """Read this replica's reply topic from now on: the first call subscribes (before the
        requester's Consume-Ok, since a non-persistent topic keeps nothing for later)."""
        if self._consumer is not None:
            return
        async with self._subscribing:
            if self._consumer is not None:
                return
            topic = self.topic(self.registry.replica)
            options = ConsumerOptions(subscription_type="exclusive", receiver_queue_size=1000)
            try:
                consumer = await self._r.client.subscribe(topic, _SUBSCRIPTION, options)
            except PulsarClientError as error:
                raise to_amqp_error(error, f"subscribing to {topic}") from None
            self._consumer = consumer
            self._r.nursery.start_soon(self._deliver_all, consumer)

    async def _deliver_all(self, consumer: TrioConsumer) -> None:
        try:
            async with consumer:
                async for received in consumer:
                    consumer.acknowledge(received)
                    payload = received.payload
                    (size,) = _HEADER_SIZE.unpack_from(payload)
                    start = _HEADER_SIZE.size
                    name = received.properties.get(_NAME, "")
                    header, body = payload[start : start + size], payload[start + size :]
                    self.registry.deliver(name, Message("", name, header, body))
        except PulsarClientError as error:
            log.warning("direct replies from other replicas stopped: %s", error)
        finally:
            if self._consumer is consumer:
                self._consumer = None  # the next reply consumer subscribes again
