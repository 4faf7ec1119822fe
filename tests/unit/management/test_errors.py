"""gateway/management/errors.py: AMQP refusals as the management API answers them
(rabbit_mgmt_util:direct_request)."""

from __future__ import annotations

import json

import pytest

from gateway.amqp.errors import AMQPError, ReplyCode
from gateway.management.errors import explanation, from_amqp


@pytest.mark.parametrize(
    ("code", "text", "status", "body"),
    [
        (
            ReplyCode.NOT_FOUND,
            "no queue 'q' in vhost '/'",
            404,
            {"error": "not_found", "reason": "no queue 'q' in vhost '/'"},
        ),
        (
            ReplyCode.ACCESS_REFUSED,
            "access to queue 'q' refused",
            401,
            {"error": "not_authorised", "reason": "Access refused."},
        ),
        (
            ReplyCode.NOT_ALLOWED,
            "vhost x not found",
            401,
            {"error": "not_authorised", "reason": "Access refused."},
        ),
        (
            ReplyCode.PRECONDITION_FAILED,
            "queue 'q' in vhost '/' not empty",
            400,
            {"error": "bad_request", "reason": "queue 'q' in vhost '/' not empty"},
        ),
        (
            ReplyCode.RESOURCE_LOCKED,
            "cannot obtain exclusive access",
            400,
            {"error": "bad_request", "reason": "cannot obtain exclusive access"},
        ),
    ],
)
def test_amqp_refusals(code: int, text: str, status: int, body: dict[str, str]) -> None:
    response = from_amqp(AMQPError(code, text)).response()
    assert response.status == status
    assert json.loads(response.body) == body


def test_the_explanation_is_the_text_without_its_prefix() -> None:
    error = AMQPError(ReplyCode.PRECONDITION_FAILED, "inequivalent arg 'durable'")
    assert error.reply_text == "PRECONDITION_FAILED - inequivalent arg 'durable'"
    assert explanation(error) == "inequivalent arg 'durable'"
