"""Error classes and their AMQP mapping (pure)."""

from __future__ import annotations

import pytest

from gateway.amqp.errors import ChannelError, ConnectionException, ReplyCode
from gateway.pulsar.errors import (
    AdminError,
    Conflict,
    NotFound,
    PreconditionFailed,
    PulsarClientError,
    SendError,
    Unauthorized,
    Unavailable,
    admin_error_for,
    is_transient,
    to_amqp_error,
)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (404, NotFound),
        (409, Conflict),
        (412, PreconditionFailed),
        (401, Unauthorized),
        (403, Unauthorized),
        (500, Unavailable),
        (503, Unavailable),
        (400, AdminError),
        (405, AdminError),
    ],
)
def test_admin_error_for_status(status: int, cls: type[AdminError]) -> None:
    err = admin_error_for(status, "GET", "/admin/v2/x", "why")
    assert type(err) is cls
    assert (err.status, err.method, err.path, err.reason) == (status, "GET", "/admin/v2/x", "why")
    assert "GET /admin/v2/x" in str(err) and "why" in str(err)


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


def test_is_transient() -> None:
    assert is_transient(Unavailable(None, "GET", "/", ""))
    assert is_transient(SendError("Timeout"))
    assert not is_transient(SendError("MessageTooBig"))
    assert not is_transient(NotFound(404, "GET", "/", ""))
