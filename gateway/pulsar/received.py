"""A message a ``TrioConsumer`` received (consumer.py), to acknowledge or not.

``ReceivedMessage`` wraps pulsar-client's message from the Python listener;
``ListenedMessage`` one from the compiled listener (native/listener.c), whose accessors and
acknowledgements are C calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from gateway.pulsar.bridge import ignore_result
from gateway.pulsar.ids import BatchPosition, MessageId, batch_position, further, is_chunked
from gateway.pulsar.incoming import IncomingMessage
from gateway.pulsar.nul_properties import ESCAPED_KEY, restored


class Settles(Protocol):
    """The consumer a message came from, which acknowledges it."""

    def acknowledge(self, message: ReceivedMessage) -> None: ...

    def negative_acknowledge(self, message: ReceivedMessage) -> None: ...


class ReceivedMessage(IncomingMessage):
    """One message a consumer received, to acknowledge or not."""

    __slots__ = ("_id_bytes", "_owner", "native_consumer", "place", "topic")

    def __init__(
        self, native: Any, native_consumer: Any, owner: Settles, place: int | None = None
    ) -> None:
        # IncomingMessage's fields set here rather than by its __init__: a call less for
        # every message received.
        self.native = native
        self._id = None
        self.native_consumer = native_consumer  # the _pulsar.Consumer it came from
        self._owner = owner
        # Its place in line in a consumer ordered by priority (put_back returns it there).
        self.place = place
        # The topic it came from (one TrioConsumer may read several). An attribute, read
        # here: the delivery path asks for it five times per message (routing filter,
        # redelivery key, outstanding counts, the consumer's furthest taken).
        self.topic: str = str(native.topic_name())
        self._id_bytes: bytes | None = None

    @property
    def id_bytes(self) -> bytes:
        """The message id serialized by pulsar-client: an identity for it within its topic,
        at two calls into C++ rather than ``message_id``'s five."""
        if self._id_bytes is None:
            self._id_bytes = bytes(self.native.message_id().serialize())
        return self._id_bytes

    @property
    def in_batch(self) -> bool:
        """Whether it shares its Pulsar entry with other messages (a producer batch of two or
        more): Pulsar then acknowledges and redelivers the entry as a whole unless told
        otherwise. A batch of one (a batching producer's lone message) is an entry of its own."""
        position = self.batch_position
        return position.batch_index >= 0 and position.batch_size > 1

    @property
    def chunked(self) -> bool:
        """Whether it was stored in chunks (a message above the broker's maxMessageSize,
        from a chunking producer). pulsar-client's negative acknowledgement of one sends back
        only its last chunk (measured with pulsar-client 3.13 on Pulsar 4.0: the consumer
        drops that chunk as incomplete and holds the others until it closes), so it is given
        back like a message of a batch: by copy, or by closing its consumer."""
        return is_chunked(self.id_bytes)

    @property
    def batch_position(self) -> BatchPosition:
        """Its entry, index in the entry's batch and the batch's size."""
        return batch_position(self.id_bytes)

    def contents(self) -> tuple[str, bytes, dict[str, str]]:
        """``topic``, ``payload`` and ``properties`` at once: the delivery path reads all three."""
        return self.topic, self.payload, self.properties

    @property
    def redelivery_count(self) -> int:
        """Redeliveries after nacks (Shared/Key_Shared only; kept in broker memory).

        Not incremented when a message comes back because its consumer closed.
        """
        return int(self.native.redelivery_count())

    @property
    def event_timestamp(self) -> int:
        """Milliseconds; 0 when the producer set none."""
        return int(self.native.event_timestamp())

    def ack(self) -> None:
        self._owner.acknowledge(self)

    def nack(self) -> None:
        self._owner.negative_acknowledge(self)

    # The native calls behind the consumer's ``acknowledge`` / ``negative_acknowledge``, which
    # also keep its bookkeeping: for the consumer only.
    def send_acknowledgement(self) -> None:
        self.native_consumer.acknowledge_async(self.native, ignore_result)

    def send_negative_acknowledgement(self) -> None:
        self.native_consumer.negative_acknowledge(self.native)

    def __repr__(self) -> str:
        return f"ReceivedMessage({self.topic!r}, {self.message_id})"


class ListenedMessage(ReceivedMessage):
    """A message from the compiled listener: ``native`` is a ``_starlight_compiled.Message``,
    which answers the same accessors from C, its id serialized, and acknowledges itself."""

    __slots__ = ()

    @property
    def message_id(self) -> MessageId:
        if self._id is None:
            import _pulsar

            self._id = MessageId.from_native(_pulsar.MessageId.deserialize(self.id_bytes))
        return self._id

    @property
    def id_bytes(self) -> bytes:
        if self._id_bytes is None:
            self._id_bytes = self.native.id_bytes()
        return self._id_bytes

    def contents(self) -> tuple[str, bytes, dict[str, str]]:
        # One call into C for the three.
        contents: tuple[str, bytes, dict[str, str]] = self.native.contents()
        if ESCAPED_KEY in contents[2]:  # a NUL in some (nul_properties.py)
            return contents[0], contents[1], restored(contents[2])
        return contents

    def send_acknowledgement(self) -> None:
        self.native.acknowledge()

    def send_negative_acknowledgement(self) -> None:
        self.native.negative_acknowledge()


def furthest_per_topic(messages: Iterable[ReceivedMessage]) -> dict[str, BatchPosition]:
    """Per topic, the position of the message of ``messages`` furthest along it."""
    furthest: dict[str, BatchPosition] = {}
    for message in messages:
        at = message.batch_position
        known = furthest.get(message.topic)
        if known is None or further(at, known):
            furthest[message.topic] = at
    return furthest
