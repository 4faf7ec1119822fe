"""What ``PulsarVirtualHost.consume`` returns for a classic or quorum queue: the queue's
Pulsar subscription, registered in the metadata store while it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gateway.backend.pulsar.delivery import PulsarQueueSubscription

__all__ = ["RegisteredSubscription"]


class RegisteredSubscription:
    """What ``consume`` returns: the queue's Pulsar subscription, whose ``close`` also waits
    until the consumer is unregistered from the metadata store (and an auto-delete queue it
    left without consumers anywhere is deleted). Cancel-Ok therefore comes after both: a
    client that cancels and then deletes if-unused, consumes exclusively or declares finds
    the consumer gone, as with RabbitMQ."""

    __slots__ = ("_settled", "receive", "receive_nowait", "subscription")

    def __init__(
        self, subscription: PulsarQueueSubscription, settled: Callable[[], Awaitable[None]]
    ) -> None:
        self.subscription = subscription
        # The delivery path calls the subscription's own methods: no extra call per message.
        # ``receive_nowait`` is what lets the delivery loop hand a consumer's buffered
        # messages over in one pass (server/consuming.py ``_deliver_loop``); without it, one message
        # per pass starved consumers whenever publishers kept the gateway busy.
        self.receive = subscription.receive
        self.receive_nowait = subscription.receive_nowait
        self._settled = settled

    async def close(self) -> None:
        await self.subscription.close()
        await self._settled()

    async def retire(self, spawn: Callable[[Callable[[], Awaitable[None]]], None]) -> bool:
        """Basic.Cancel with deliveries unacknowledged: the consumer stops receiving and is
        unregistered now (as ``close``), and its Pulsar consumer stays open until they are
        settled (acknowledged, or given back when the channel closes), then closes. True:
        the deliveries stay valid. What it read ahead goes back as it closes, uncounted: a
        negative acknowledgement now would have consumers on other replicas, which do not
        know it was never delivered, mark it redelivered."""
        self.subscription.retire(spawn, hand_back=False)
        self.subscription.leave()
        await self._settled()
        return True
