"""What a message pulsar-client handed over answers, for a consumer's and a reader's alike."""

from __future__ import annotations

from typing import Any

from gateway.pulsar.ids import MessageId
from gateway.pulsar.nul_properties import ESCAPED_KEY, restored


class IncomingMessage:
    """One message from Pulsar, around pulsar-client's ``_pulsar.Message``. Properties are
    str -> str (Pulsar's only kind)."""

    __slots__ = ("_id", "native")

    def __init__(self, native: Any) -> None:
        self.native = native  # _pulsar.Message
        self._id: MessageId | None = None

    @property
    def payload(self) -> bytes:
        return bytes(self.native.data())

    @property
    def properties(self) -> dict[str, str]:
        properties: dict[str, str] = self.native.properties()  # a new dict each call
        if ESCAPED_KEY in properties:  # a NUL in some (nul_properties.py)
            return restored(properties)
        return properties

    @property
    def message_id(self) -> MessageId:
        # Five calls into pulsar-client, and asked for more than once for a message that a
        # drain or purge filter looks at: read once.
        if self._id is None:
            self._id = MessageId.from_native(self.native.message_id())
        return self._id

    @property
    def publish_timestamp(self) -> int:
        """Milliseconds since the epoch, set by the producer's client library."""
        return int(self.native.publish_timestamp())
