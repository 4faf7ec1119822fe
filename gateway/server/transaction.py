"""What a channel in tx mode holds back until Tx.Commit: its publishes and its settlements.

RabbitMQ's channel (``rabbit_channel``, ``tx = {Msgs, Acks}``) keeps a transaction's messages
and acks/nacks/rejects aside and applies them at Tx.Commit: first the messages are routed and
delivered, then the settlements are applied; Commit-Ok goes once the queues have the messages.
Tx.Rollback drops the messages and puts the settled deliveries back among the channel's
unacknowledged ones (they are not requeued: the client may settle them again). RabbitMQ has no
limit on a transaction's size; a gateway holding the messages in memory must, so a
transaction holds at most ``MAX_TX_BYTES`` (bodies plus a fixed cost per message).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from gateway.amqp.errors import ReplyCode, amqp_error
from gateway.backend.interface import Message

T = TypeVar("T")

# 64 MiB per channel: well above what transactional publishers batch (a few hundred small
# messages), far below what would hurt a gateway serving many connections.
MAX_TX_BYTES: Final = 64 * 1024 * 1024
# What a buffered message costs beyond its body (header, names, bookkeeping), roughly.
MESSAGE_OVERHEAD: Final = 512


@dataclass(frozen=True, slots=True)
class HeldPublish:
    message: Message
    mandatory: bool


@dataclass(eq=False)
class Settlement(Generic[T]):
    """One Ack (``requeue is None``), Nack or Reject of the transaction, with the entries (by
    delivery tag) it took from the channel's unacknowledged deliveries."""

    entries: dict[int, T]
    requeue: bool | None


@dataclass(eq=False)
class Transaction(Generic[T]):
    publishes: list[HeldPublish] = field(default_factory=list)
    settlements: list[Settlement[T]] = field(default_factory=list)
    held_bytes: int = 0

    def hold_publish(self, message: Message, mandatory: bool) -> None:
        """Keep a publish for the commit; 406 once the transaction would exceed the limit
        (the channel closes and the transaction with it, as on any channel error)."""
        cost = len(message.body) + MESSAGE_OVERHEAD
        if self.held_bytes + cost > MAX_TX_BYTES:
            raise amqp_error(
                ReplyCode.PRECONDITION_FAILED,
                f"transaction exceeds the gateway's limit of {MAX_TX_BYTES} bytes of "
                "uncommitted messages; commit more often",
            )
        self.held_bytes += cost
        self.publishes.append(HeldPublish(message, mandatory))

    def hold_settlement(self, entries: dict[int, T], requeue: bool | None) -> None:
        if entries:
            self.settlements.append(Settlement(entries, requeue))

    def held_entries(self) -> dict[int, T]:
        """Every delivery a settlement of the transaction took, by tag."""
        held: dict[int, T] = {}
        for settlement in self.settlements:
            held.update(settlement.entries)
        return held

    def take(self) -> tuple[list[HeldPublish], list[Settlement[T]]]:
        """Everything held, for a commit or a rollback; the transaction starts afresh (a
        channel stays in tx mode: every commit or rollback starts the next transaction)."""
        publishes, settlements = self.publishes, self.settlements
        self.publishes, self.settlements, self.held_bytes = [], [], 0
        return publishes, settlements
