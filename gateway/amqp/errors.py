"""AMQP 0-9-1 reply codes and the exceptions that carry them.

The spec splits reply codes into *soft* errors, which close only the channel the failing method
arrived on (Channel.Close), and *hard* errors, which close the whole connection
(Connection.Close). RabbitMQ follows the spec's table, with the extensions listed in its
"spec differences" page; the split below is RabbitMQ's (``rabbit_framing_amqp_0_9_1`` marks
each code ``soft_error``/``hard_error``).

Reply text is formatted the way RabbitMQ formats it, ``"<NAME> - <explanation>"``, e.g.
``"NOT_FOUND - no queue 'x' in vhost '/'"``: clients log it and a few libraries match on the
prefix, so we keep it byte-for-byte familiar.
"""

from __future__ import annotations

from enum import IntEnum


class ReplyCode(IntEnum):
    REPLY_SUCCESS = 200
    CONTENT_TOO_LARGE = 311
    NO_ROUTE = 312
    NO_CONSUMERS = 313
    CONNECTION_FORCED = 320
    INVALID_PATH = 402
    ACCESS_REFUSED = 403
    NOT_FOUND = 404
    RESOURCE_LOCKED = 405
    PRECONDITION_FAILED = 406
    FRAME_ERROR = 501
    SYNTAX_ERROR = 502
    COMMAND_INVALID = 503
    CHANNEL_ERROR = 504
    UNEXPECTED_FRAME = 505
    RESOURCE_ERROR = 506
    NOT_ALLOWED = 530
    NOT_IMPLEMENTED = 540
    INTERNAL_ERROR = 541

    @property
    def is_soft(self) -> bool:
        """True when the spec closes only the channel (Channel.Close) for this code."""
        return int(self) in SOFT_CODES

    @property
    def is_hard(self) -> bool:
        """True when the spec closes the whole connection (Connection.Close) for this code."""
        return int(self) in HARD_CODES


# 311-313 are "soft" in the spec although RabbitMQ only ever uses 312/313 in Basic.Return; they
# are listed so that a channel error carrying them is never mistaken for a connection error.
SOFT_CODES: frozenset[int] = frozenset({311, 312, 313, 403, 404, 405, 406})
HARD_CODES: frozenset[int] = frozenset({320, 402, 501, 502, 503, 504, 505, 506, 530, 540, 541})

# Reply text is a shortstr on the wire: at most 255 octets of UTF-8.
_MAX_REPLY_TEXT = 255


def code_name(code: int) -> str | None:
    """``404`` → ``"NOT_FOUND"``; ``None`` for a code outside the spec's table."""
    try:
        return ReplyCode(code).name
    except ValueError:
        return None


def format_reply_text(code: int, text: str) -> str:
    """Prefix ``text`` with the code's name like RabbitMQ and fit it in a shortstr.

    Text that already carries the prefix (callers copying RabbitMQ's wording verbatim) is left
    alone, so formatting twice is harmless.
    """
    name = code_name(code)
    if name is not None and not text.startswith(name) and code != ReplyCode.REPLY_SUCCESS:
        text = f"{name} - {text}" if text else name
    encoded = text.encode("utf-8", "surrogateescape")
    if len(encoded) > _MAX_REPLY_TEXT:
        # Cut on a character boundary: a truncated multi-byte sequence would be invalid UTF-8.
        text = encoded[:_MAX_REPLY_TEXT].decode("utf-8", "ignore")
    return text


class AMQPError(Exception):
    """A protocol-level failure that the peer is told about with a reply code.

    ``class_id``/``method_id`` name the method that caused it (0/0 when no method did, e.g. a
    framing error), as Channel.Close and Connection.Close require.
    """

    def __init__(
        self, reply_code: int, reply_text: str = "", class_id: int = 0, method_id: int = 0
    ) -> None:
        self.reply_code = int(reply_code)
        self.reply_text = format_reply_text(self.reply_code, reply_text)
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.reply_text)

    @property
    def is_hard(self) -> bool:
        """Whether RabbitMQ would close the connection (not just the channel) for this code."""
        return self.reply_code not in SOFT_CODES

    def with_method(self, class_id: int, method_id: int) -> AMQPError:
        """The same error attributed to a method, keeping an attribution already made."""
        if self.class_id or self.method_id:
            return self
        # Copy without calling __init__: subclasses (FrameError) have other signatures.
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.args = self.args
        clone.class_id = class_id
        clone.method_id = method_id
        return clone

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.reply_code}, {self.reply_text!r}, "
            f"class_id={self.class_id}, method_id={self.method_id})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AMQPError):
            return NotImplemented
        return (type(self), self.reply_code, self.reply_text, self.class_id, self.method_id) == (
            type(other),
            other.reply_code,
            other.reply_text,
            other.class_id,
            other.method_id,
        )

    def __hash__(self) -> int:
        return hash((type(self), self.reply_code, self.reply_text))


class ChannelError(AMQPError):
    """A soft error: the channel is closed with Channel.Close, the connection lives on."""


class ConnectionException(AMQPError):
    """A hard error: the connection is closed with Connection.Close.

    Named so that it does not shadow the builtin ``ConnectionError`` (an ``OSError``).
    """


class FrameError(ConnectionException):
    """The byte stream cannot be framed any more (501): after it nothing more is read."""

    def __init__(self, reply_text: str) -> None:
        super().__init__(ReplyCode.FRAME_ERROR, reply_text)


def amqp_error(
    reply_code: int, reply_text: str = "", class_id: int = 0, method_id: int = 0
) -> AMQPError:
    """A ``ChannelError`` for a soft code, a ``ConnectionException`` for anything else."""
    cls = ChannelError if int(reply_code) in SOFT_CODES else ConnectionException
    return cls(reply_code, reply_text, class_id, method_id)
