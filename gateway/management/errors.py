"""The management API's answers to what goes wrong, with RabbitMQ's status codes and bodies.

RabbitMQ (``rabbit_mgmt_util``, ``rabbit_web_dispatch_access_control``, 3.13) answers every
refusal with ``{"error": <type>, "reason": <text>}``:

- 400 ``bad_request`` for a body it cannot use (``not_json``), a wrong field and every AMQP
  refusal other than the three below (``inequivalent arg 'durable' for queue 'q' in vhost
  '/': received 'false' but current is 'true'`` — the AMQP text without its ``NAME - ``
  prefix);
- 401 ``not_authorized`` ``Not_Authorized`` for credentials it refuses, and 401
  ``not_authorised`` (British spelling, as RabbitMQ writes it) for a user who may not do
  what was asked (``Not administrator user``, ``User not authorised to access virtual
  host``, ``Access refused.`` for an AMQP 403); RabbitMQ never answers 403;
- 404 ``Object Not Found`` / ``Not Found`` for a missing object or path (and
  ``not_found`` / ``vhost_not_found`` for a write into a vhost that does not exist);
- 405 with an ``allow`` header and no body for a method the path does not take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.amqp.errors import AMQPError, ReplyCode, code_name

__all__ = [
    "ApiError",
    "Response",
    "bad_request",
    "from_amqp",
    "json_response",
    "not_authorised",
    "not_found",
    "unavailable",
]


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


class ApiError(Exception):
    """Raised anywhere below a handler; the API turns it into its response."""

    def __init__(
        self,
        status: int,
        error: str,
        reason: Any,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason
        self.headers = headers

    def response(self) -> Response:
        return json_response(
            self.status, {"error": self.error, "reason": self.reason}, headers=self.headers
        )


def json_response(status: int, data: Any, *, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(status, body, "application/json", headers)


def bad_request(reason: Any) -> ApiError:
    return ApiError(400, "bad_request", reason)


def not_found(reason: str = "Not Found", error: str = "Object Not Found") -> ApiError:
    return ApiError(404, error, reason)


def vhost_not_found() -> ApiError:
    """A write into a vhost that does not exist (``with_vhost_and_props``)."""
    return ApiError(404, "not_found", "vhost_not_found")


def unavailable(error: Exception) -> ApiError:
    """A store (ZooKeeper, Pulsar's admin API) that cannot answer now: 503, its reason."""
    return ApiError(503, "service_unavailable", str(error))


def not_authorised(reason: str) -> ApiError:
    return ApiError(401, "not_authorised", reason)


def not_authenticated() -> ApiError:
    return ApiError(401, "not_authorized", "Not_Authorized", AUTHENTICATE)


AUTHENTICATE = (("www-authenticate", 'Basic realm="RabbitMQ Management"'),)


def explanation(error: AMQPError) -> str:
    """The AMQP reply text without its ``NAME - `` prefix: RabbitMQ's ``explanation``."""
    name = code_name(error.reply_code)
    text = error.reply_text
    if name is not None and text.startswith(f"{name} - "):
        return text[len(name) + 3 :]
    return text


def from_amqp(error: AMQPError) -> ApiError:
    """``direct_request``'s mapping of a channel's refusal."""
    if error.reply_code == ReplyCode.NOT_FOUND:
        return not_found(explanation(error), "not_found")
    if error.reply_code in (ReplyCode.ACCESS_REFUSED, ReplyCode.NOT_ALLOWED):
        return not_authorised("Access refused.")
    return bad_request(explanation(error))
