"""A channel's delivery tags and prefetch credit: AMQP semantics, without I/O.

Delivery tags are channel-scoped, start at 1 and grow by one per delivery (Basic.Deliver and
Basic.Get-Ok alike, §1.8.3.13 ``delivery-tag``). A client settles them with Ack, Nack or Reject,
one tag or (``multiple``) every tag up to one; ``multiple`` with tag 0 means all of them. An
unknown tag is 406 PRECONDITION_FAILED on the channel (RabbitMQ: ``unknown delivery tag 7``).

Basic.Qos sets a per-consumer limit (``global=false``: for consumers started afterwards) and a
per-channel one (``global=true``: shared by all consumers of the channel), as RabbitMQ
reinterprets the spec's ``global`` flag. (Channel.Flow(active=false), the spec's other brake,
is refused with 540 as by RabbitMQ 4: ``connection.py``.)

The shell (``server/session.py``) keeps what it delivered here, keyed by tag; what an entry is
(a delivery and its consumer) is the shell's business, hence the type parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from gateway.amqp.commands import BasicQos
from gateway.amqp.errors import ReplyCode, amqp_error

__all__ = ["DeliveryTags", "Prefetch"]

T = TypeVar("T")


class DeliveryTags(Generic[T]):
    __slots__ = ("_forgotten", "_next", "unsettled")

    def __init__(self) -> None:
        self._next = 1
        self.unsettled: dict[int, T] = {}
        # Tags whose deliveries were given back when their consumer was cancelled: the client
        # may still settle them, and that must not be an unknown-tag error.
        self._forgotten: set[int] = set()

    def next(self) -> int:
        """The tag of the next delivery on the channel."""
        tag = self._next
        self._next += 1
        return tag

    def settle(self, tag: int, multiple: bool) -> list[T]:
        """Take the entries an Ack/Nack/Reject of ``tag`` settles (possibly none: a forgotten
        tag); 406 for a tag that was never delivered or is settled already."""
        return list(self.take(tag, multiple).values())

    def take(self, tag: int, multiple: bool) -> dict[int, T]:
        """``settle``, keeping the tags (a transaction may give the entries back)."""
        unsettled = self.unsettled
        if not multiple:
            entry = unsettled.pop(tag, None)
            if entry is not None:
                return {tag: entry}
            if tag in self._forgotten:
                self._forgotten.discard(tag)
                return {}
            raise _unknown(tag)
        if tag == 0:
            taken = dict(unsettled)
            unsettled.clear()
            return taken
        if tag not in unsettled and tag not in self._forgotten:
            raise _unknown(tag)
        if self._forgotten:
            self._forgotten = {t for t in self._forgotten if t > tag}
        # Tags ascend in the dict's order (each delivery is entered under ``next()``'s tag,
        # ``restore`` sorts), so the ones settled are its head: no walk over the tags after
        # ``tag`` (a multiple ack every 100 with 500 unacknowledged walked all 500).
        upto = []
        for t in unsettled:
            if t > tag:
                break
            upto.append(t)
        return {t: unsettled.pop(t) for t in upto}

    def restore(self, entries: dict[int, T]) -> None:
        """Make ``entries`` (from ``take``) unsettled again, in tag order (Tx.Rollback)."""
        if entries:
            self.unsettled = dict(sorted({**self.unsettled, **entries}.items()))

    def take_all(self) -> list[T]:
        """Every unsettled entry (Basic.Recover, the channel closing)."""
        entries = list(self.unsettled.values())
        self.unsettled.clear()
        return entries

    def forget(self, which: Callable[[T], bool]) -> list[T]:
        """Take the entries ``which`` selects, remembering their tags as settled elsewhere (a
        cancelled consumer's messages, given back to the queue)."""
        taken = []
        for tag, entry in list(self.unsettled.items()):
            if which(entry):
                del self.unsettled[tag]
                self._forgotten.add(tag)
                taken.append(entry)
        return taken


def _unknown(tag: int) -> Exception:
    return amqp_error(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {tag}")


class Prefetch:
    """Basic.Qos of one channel: may a consumer be sent one more message?"""

    __slots__ = ("channel", "consumer")

    def __init__(self) -> None:
        self.consumer = 0  # Basic.Qos global=false: the limit of consumers started from now
        self.channel = 0  # Basic.Qos global=true: shared by all consumers of the channel

    def qos(self, command: BasicQos) -> None:
        if command.prefetch_size:
            # RabbitMQ does not implement a byte limit either.
            raise amqp_error(
                ReplyCode.NOT_IMPLEMENTED, f"prefetch_size!=0 ({command.prefetch_size})"
            )
        if command.global_:
            self.channel = command.prefetch_count
        else:
            self.consumer = command.prefetch_count

    def window(self) -> int:
        """The most unacknowledged deliveries a consumer started now can hold (0: no limit)."""
        limits = [limit for limit in (self.consumer, self.channel) if limit]
        return min(limits, default=0)

    def allows(
        self, no_ack: bool, limit: int, unacked: int, channel_unacked: Callable[[], int]
    ) -> bool:
        """Whether a consumer with prefetch ``limit`` (0: none) holding ``unacked`` deliveries
        may get another; ``channel_unacked`` counts those of the whole channel (asked only
        under a channel-wide limit)."""
        if no_ack:
            return True  # Basic.Qos does not apply to no-ack consumers (RabbitMQ)
        if limit and unacked >= limit:
            return False
        return not (self.channel and channel_unacked() >= self.channel)
