"""Reply codes and errors: RabbitMQ's code table, its reply-text format, the error classes."""

from __future__ import annotations

from gateway.amqp.errors import (
    HARD_CODES,
    SOFT_CODES,
    AMQPError,
    ChannelError,
    ConnectionException,
    FrameError,
    ReplyCode,
    amqp_error,
    format_reply_text,
)


def test_reply_code_table_is_rabbitmqs() -> None:
    assert {int(c) for c in ReplyCode} == SOFT_CODES | HARD_CODES | {200}
    assert not SOFT_CODES & HARD_CODES
    assert ReplyCode.NOT_FOUND.is_soft and not ReplyCode.NOT_FOUND.is_hard
    assert ReplyCode.NOT_IMPLEMENTED.is_hard
    assert ReplyCode.CONNECTION_FORCED.is_hard
    assert ReplyCode.CONTENT_TOO_LARGE.is_soft


def test_reply_text_is_formatted_like_rabbitmq() -> None:
    error = ChannelError(ReplyCode.NOT_FOUND, "no queue 'x' in vhost '/'", 50, 10)
    assert error.reply_text == "NOT_FOUND - no queue 'x' in vhost '/'"
    assert str(error) == error.reply_text
    # Already prefixed: left alone.
    assert format_reply_text(404, "NOT_FOUND - x") == "NOT_FOUND - x"
    assert format_reply_text(200, "Normal shutdown") == "Normal shutdown"
    assert format_reply_text(999, "odd") == "odd"
    assert format_reply_text(406, "") == "PRECONDITION_FAILED"


def test_reply_text_fits_a_short_string() -> None:
    text = format_reply_text(404, "é" * 300)
    assert len(text.encode("utf-8")) <= 255
    text.encode("utf-8")  # still valid UTF-8


def test_error_classes() -> None:
    assert isinstance(amqp_error(404, "x"), ChannelError)
    assert isinstance(amqp_error(504, "x"), ConnectionException)
    assert not issubclass(ConnectionException, ConnectionError)  # no builtin shadowing
    assert AMQPError(404, "x").is_hard is False
    assert AMQPError(541, "x").is_hard is True
    frame_error = FrameError("bad")
    attributed = frame_error.with_method(60, 40)
    assert type(attributed) is FrameError
    assert (attributed.class_id, attributed.method_id) == (60, 40)
    assert attributed.reply_text == "FRAME_ERROR - bad"
    assert attributed.with_method(1, 1) is attributed
    assert AMQPError(404, "x", 1, 2) == AMQPError(404, "x", 1, 2)
    assert "404" in repr(AMQPError(404, "x"))
