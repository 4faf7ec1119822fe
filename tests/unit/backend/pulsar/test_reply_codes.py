"""Pulsar's errors as AMQP reply codes (pure)."""

from __future__ import annotations

import pytest

from gateway.amqp.errors import ChannelError, ConnectionException, ReplyCode
from gateway.backend.pulsar.reply_codes import to_amqp_error
from gateway.pulsar.errors import (
    AdminError,
    Conflict,
    NotFound,
    PreconditionFailed,
    PulsarClientError,
    SendError,
    Unauthorized,
    Unavailable,
)


@pytest.mark.parametrize(
    ("err", "code", "soft"),
    [
        (NotFound(404, "GET", "/p", "Topic not found"), ReplyCode.NOT_FOUND, True),
        (Unauthorized(403, "GET", "/p", "no"), ReplyCode.ACCESS_REFUSED, True),
        (PreconditionFailed(412, "DELETE", "/p", "active consumers"), 406, True),
        (Conflict(409, "PUT", "/p", "exists"), ReplyCode.RESOURCE_LOCKED, True),
        (Unavailable(None, "GET", "/p", "refused"), ReplyCode.INTERNAL_ERROR, False),
        (Unavailable(503, "GET", "/p", "loading"), ReplyCode.INTERNAL_ERROR, False),
        (AdminError(400, "GET", "/p", "bad"), ReplyCode.INTERNAL_ERROR, False),
        (PulsarClientError("TopicNotFound"), ReplyCode.NOT_FOUND, True),
        (PulsarClientError("AuthorizationError"), ReplyCode.ACCESS_REFUSED, True),
        (SendError("MessageTooBig"), ReplyCode.PRECONDITION_FAILED, True),
        (PulsarClientError("ConsumerBusy"), ReplyCode.RESOURCE_LOCKED, True),
        (SendError("Timeout"), ReplyCode.INTERNAL_ERROR, False),
        (RuntimeError("boom"), ReplyCode.INTERNAL_ERROR, False),
    ],
)
def test_to_amqp_error(err: Exception, code: int, soft: bool) -> None:
    amqp = to_amqp_error(err, "queue 'q' in vhost '/'")
    assert amqp.reply_code == code
    assert isinstance(amqp, ChannelError if soft else ConnectionException)
    assert amqp.is_hard is not soft
    assert "queue 'q' in vhost '/'" in amqp.reply_text
    assert len(amqp.reply_text.encode()) <= 255


def test_reply_text_keeps_pulsar_reason() -> None:
    amqp = to_amqp_error(NotFound(404, "GET", "/p", "Subscription q not found"))
    assert amqp.reply_text == "NOT_FOUND - Subscription q not found"
