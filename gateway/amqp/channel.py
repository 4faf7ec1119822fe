"""Per-channel protocol state: open/closing, flow, and content assembly.

A published message arrives as a Basic.Publish method frame, one content header frame and as
many body frames as it takes to carry ``body_size`` octets (§4.2.6). Frames of one message are
never interleaved with other frames *on the same channel*; anything else in between is 505
UNEXPECTED_FRAME, and a body frame larger than what is left is 501 FRAME_ERROR — both hard
errors, with RabbitMQ's wording (``rabbit_command_assembler``).

A message larger than ``max_message_size`` is refused as soon as its content header announces
the size, before any body is buffered, with RabbitMQ's channel error: 406 PRECONDITION_FAILED
"message size N is larger than configured max size M" (``rabbit_channel:check_msg_size``). The
channel then closes; its remaining body frames are discarded by the closing state (a channel
waiting for Close-Ok ignores everything but Close/Close-Ok, §4.2.4 / RabbitMQ's ``closing``
state).
"""

from __future__ import annotations

from enum import Enum

from gateway.amqp.errors import ChannelError, ConnectionException, ReplyCode
from gateway.amqp.events import PublishReceived
from gateway.amqp.fastpath import decode_content_header
from gateway.amqp.fieldtable import FieldDecodeError
from gateway.amqp.properties import validate_properties

__all__ = ["Channel", "ChannelState"]

_BASIC = 60


class ChannelState(Enum):
    OPEN = "open"
    # We sent Channel.Close: only Close-Ok (or the client's own Close) is looked at.
    CLOSING = "closing"
    # The client sent Channel.Close: our Close-Ok waits until the shell has given back what
    # the channel held (``ServerConnection.accept_channel_close``); until then the number is
    # not free, and whatever else arrives on it is discarded (§4.2.4: after Close, only
    # Close-Ok).
    CLOSE_RECEIVED = "close-received"


# What the next frame on the channel must be (ints, not an Enum: checked on every frame).
_METHOD, _HEADER, _BODY = 0, 1, 2


def _out_of_order(expected: int, instead: str) -> ConnectionException:
    """505 for a content frame that came when ``expected`` (a method, or the other kind of
    content frame, whose RabbitMQ wording is ``instead``) was due. Only on the error path."""
    if expected == _METHOD:
        return ConnectionException(
            ReplyCode.UNEXPECTED_FRAME, "expected method frame, got non method frame instead"
        )
    return ConnectionException(ReplyCode.UNEXPECTED_FRAME, instead, _BASIC, 40)


class Channel:
    __slots__ = (
        "_body_size",
        "_exchange",
        "_expect",
        "_header",
        "_immediate",
        "_mandatory",
        "_parts",
        "_received",
        "_routing_key",
        "close_code",
        "close_text",
        "in_content",
        "max_message_size",
        "number",
        "state",
    )

    def __init__(self, number: int, max_message_size: int) -> None:
        self.number = number
        self.max_message_size = max_message_size
        self.state = ChannelState.OPEN
        self.close_code = 0
        self.close_text = ""
        self._expect = _METHOD
        # True between a Basic.Publish and its last body frame.
        self.in_content = False
        self._exchange = ""
        self._routing_key = ""
        self._mandatory = False
        self._immediate = False
        self._header = b""
        self._body_size = 0
        self._received = 0
        self._parts: list[bytes] = []

    def unexpected_method(self) -> ConnectionException:
        """The error for a method frame that arrives in the middle of a message's content."""
        if self._expect == _HEADER:
            text = "expected content header for class 60, got non content header frame instead"
        else:
            text = "expected content body, got non content body frame instead"
        return ConnectionException(ReplyCode.UNEXPECTED_FRAME, text, _BASIC, 40)

    def start_content(
        self, exchange: str, routing_key: str, mandatory: bool, immediate: bool
    ) -> None:
        self._exchange = exchange
        self._routing_key = routing_key
        self._mandatory = mandatory
        self._immediate = immediate
        self._expect = _HEADER
        self.in_content = True

    def reset_content(self) -> None:
        self._expect = _METHOD
        self.in_content = False
        self._parts = []
        self._header = b""

    def on_header(self, payload: bytes) -> PublishReceived | None:
        if self._expect != _HEADER:
            raise _out_of_order(
                self._expect, "expected content body, got non content body frame instead"
            )
        class_id, weight, body_size, raw = decode_content_header(payload)
        if class_id != _BASIC or weight != 0:
            raise ConnectionException(
                ReplyCode.UNEXPECTED_FRAME,
                f"expected content header for class 60, got one for class {class_id} instead"
                if class_id != _BASIC
                else f"content header weight must be 0, not {weight}",
                _BASIC,
                40,
            )
        try:
            validate_properties(raw)
        except FieldDecodeError as error:
            raise ConnectionException(
                ReplyCode.SYNTAX_ERROR, f"malformed content header: {error}", _BASIC, 40
            ) from None
        if body_size > self.max_message_size:
            self.reset_content()
            # RabbitMQ's code and wording (rabbit_channel:check_msg_size, which clients and
            # their test suites match), but at the header: RabbitMQ checks once the whole
            # body has arrived, we refuse before buffering any of it (docs/protocol.md).
            raise ChannelError(
                ReplyCode.PRECONDITION_FAILED,
                f"message size {body_size} is larger than configured max size "
                f"{self.max_message_size}",
                _BASIC,
                40,
            )
        if body_size == 0:
            self._expect = _METHOD
            self.in_content = False
            return self._complete(raw, b"")
        self._header = raw
        self._body_size = body_size
        self._received = 0
        self._parts = []
        self._expect = _BODY
        return None

    def on_body(self, payload: bytes) -> PublishReceived | None:
        if self._expect != _BODY:
            raise _out_of_order(
                self._expect,
                "expected content header for class 60, got non content header frame instead",
            )
        received = self._received + len(payload)
        if received > self._body_size:
            raise ConnectionException(
                ReplyCode.FRAME_ERROR,
                "content body frame exceeds remaining content size",
                _BASIC,
                40,
            )
        if received < self._body_size:
            self._parts.append(payload)
            self._received = received
            return None
        parts = self._parts
        body = b"".join((*parts, payload)) if parts else payload
        header = self._header
        self.reset_content()
        return self._complete(header, body)

    def _complete(self, header: bytes, body: bytes) -> PublishReceived:
        # Equivalent to PublishReceived(...), without the frozen dataclass's seven
        # object.__setattr__ calls: this runs once per published message.
        message = _new_object(PublishReceived)
        message.__dict__.update(
            channel=self.number,
            exchange=self._exchange,
            routing_key=self._routing_key,
            mandatory=self._mandatory,
            immediate=self._immediate,
            header=header,
            body=body,
        )
        return message


_new_object = object.__new__
