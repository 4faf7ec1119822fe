"""Error classes of the Pulsar layer (pure; their AMQP reply codes: test_reply_codes.py)."""

from __future__ import annotations

import pytest

from gateway.pulsar.errors import (
    AdminError,
    Conflict,
    NotFound,
    PreconditionFailed,
    SendError,
    Unauthorized,
    Unavailable,
    admin_error_for,
    is_transient,
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


def test_is_transient() -> None:
    assert is_transient(Unavailable(None, "GET", "/", ""))
    assert is_transient(SendError("Timeout"))
    assert not is_transient(SendError("MessageTooBig"))
    assert not is_transient(NotFound(404, "GET", "/", ""))
