"""The management API: RabbitMQ's paths, each to its handler, and the order in which a request
is judged — as cowboy's REST flow does for ``rabbitmq_management``: an unknown path is 404, a
method the path does not take 405 (with ``allow``), then the credentials (401), then the
handler (which checks what the user may do). Whatever a handler raises is answered: an
``ApiError`` with its RabbitMQ body, anything else with a 500 and a log line, never a
traceback to the client.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import unquote

from gateway.management import bindings, connections, definitions, exchanges, overview, queues
from gateway.management import vhosts as vh
from gateway.management.context import Call, Context
from gateway.management.errors import (
    AUTHENTICATE,
    ApiError,
    Response,
    bad_request,
    json_response,
    not_found,
)
from gateway.management.http import Request

log = logging.getLogger("gateway.management")

__all__ = ["ManagementApi"]

Handler = Callable[[Call], Awaitable[Response]]

#: (path pattern, {method: handler}); ``{name}`` matches one segment, percent-decoded.
ROUTES: list[tuple[str, dict[str, Handler]]] = [
    ("/api/overview", {"GET": overview.overview}),
    ("/api/whoami", {"GET": overview.whoami}),
    ("/api/cluster-name", {"GET": overview.cluster_name}),
    ("/api/extensions", {"GET": overview.extensions}),
    ("/api/nodes", {"GET": overview.nodes}),
    ("/api/nodes/{node}", {"GET": overview.node}),
    ("/api/health/checks/alarms", {"GET": overview.alarms}),
    ("/api/health/checks/local-alarms", {"GET": overview.alarms}),
    ("/api/health/checks/virtual-hosts", {"GET": overview.virtual_host_checks}),
    ("/api/aliveness-test/{vhost}", {"GET": overview.aliveness}),
    ("/api/vhosts", {"GET": vh.list_vhosts}),
    (
        "/api/vhosts/{vhost}",
        {"GET": vh.get_vhost, "PUT": vh.put_vhost, "DELETE": vh.delete_vhost},
    ),
    ("/api/vhosts/{vhost}/permissions", {"GET": vh.vhost_permissions}),
    ("/api/vhosts/{vhost}/connections", {"GET": connections.list_connections}),
    ("/api/vhosts/{vhost}/channels", {"GET": connections.list_channels}),
    ("/api/permissions", {"GET": vh.list_permissions}),
    (
        "/api/permissions/{vhost}/{user}",
        {"GET": vh.get_permission, "PUT": vh.put_permission, "DELETE": vh.delete_permission},
    ),
    ("/api/users", {"GET": vh.list_users}),
    ("/api/users/{user}", {"GET": vh.get_user, "PUT": vh.put_user, "DELETE": vh.delete_user}),
    ("/api/users/{user}/permissions", {"GET": vh.user_permissions}),
    ("/api/queues", {"GET": queues.list_queues}),
    ("/api/queues/{vhost}", {"GET": queues.list_queues}),
    (
        "/api/queues/{vhost}/{name}",
        {"GET": queues.get_queue, "PUT": queues.put_queue, "DELETE": queues.delete_queue},
    ),
    ("/api/queues/{vhost}/{name}/contents", {"DELETE": queues.purge_queue}),
    ("/api/queues/{vhost}/{name}/get", {"POST": queues.get_messages}),
    ("/api/queues/{vhost}/{name}/bindings", {"GET": queues.queue_bindings}),
    ("/api/exchanges", {"GET": exchanges.list_exchanges}),
    ("/api/exchanges/{vhost}", {"GET": exchanges.list_exchanges}),
    (
        "/api/exchanges/{vhost}/{name}",
        {
            "GET": exchanges.get_exchange,
            "PUT": exchanges.put_exchange,
            "DELETE": exchanges.delete_exchange,
        },
    ),
    ("/api/exchanges/{vhost}/{name}/publish", {"POST": exchanges.publish}),
    ("/api/exchanges/{vhost}/{name}/bindings/{direction}", {"GET": exchanges.exchange_bindings}),
    ("/api/bindings", {"GET": bindings.list_bindings}),
    ("/api/bindings/{vhost}", {"GET": bindings.list_bindings}),
    (
        "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
        {"GET": bindings.list_between, "POST": bindings.post_binding},
    ),
    (
        "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
        {"GET": bindings.get_binding, "DELETE": bindings.delete_binding},
    ),
    ("/api/connections", {"GET": connections.list_connections}),
    (
        "/api/connections/{name}",
        {"GET": connections.get_connection, "DELETE": connections.close_connection},
    ),
    ("/api/connections/{name}/channels", {"GET": connections.connection_channels}),
    ("/api/channels", {"GET": connections.list_channels}),
    ("/api/consumers", {"GET": connections.list_consumers}),
    ("/api/consumers/{vhost}", {"GET": connections.list_consumers}),
    ("/api/definitions", {"GET": definitions.export, "POST": definitions.import_}),
    ("/api/definitions/{vhost}", {"GET": definitions.export, "POST": definitions.import_}),
]

# Values a placeholder must take (anything else is an unknown path).
_CHOICES = {"direction": ("source", "destination"), "kind": ("q", "e")}


def _segments(path: str) -> list[str]:
    """The path's segments, each percent-decoded on its own (``%2F`` stays inside its
    segment: ``/api/queues/%2F/q`` is vhost ``/``); a trailing ``/`` is ignored, as by
    cowboy (amqp091-go asks for ``/api/connections/``)."""
    parts = path.split("/")[1:]
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    try:
        return [unquote(part, errors="strict") for part in parts]
    except UnicodeDecodeError:
        raise bad_request("the path is not valid UTF-8 once percent-decoded") from None


def _match(
    segments: list[str],
) -> tuple[dict[str, Handler], dict[str, str]] | None:
    for pattern, handlers in _COMPILED:
        if len(pattern) != len(segments):
            continue
        params: dict[str, str] = {}
        for expected, actual in zip(pattern, segments, strict=True):
            if expected.startswith("{"):
                name = expected[1:-1]
                if name in _CHOICES and actual not in _CHOICES[name]:
                    break
                params[name] = actual
            elif expected != actual:
                break
        else:
            return handlers, params
    return None


_COMPILED = [(tuple(pattern.split("/")[1:]), handlers) for pattern, handlers in ROUTES]


class ManagementApi:
    def __init__(self, context: Context) -> None:
        self.context = context

    async def __call__(self, request: Request) -> Response:
        try:
            return await self._answer(request)
        except ApiError as error:
            if error.status == 401 and not error.error:
                # No credentials at all: cowboy's challenge, without a body.
                return Response(401, b"", None, AUTHENTICATE)
            return error.response()
        except Exception:
            log.exception("management API: %s %s failed", request.method, request.path)
            return json_response(
                500,
                {
                    "error": "internal_server_error",
                    "reason": "the gateway failed to answer; see its log",
                },
            )

    async def _answer(self, request: Request) -> Response:
        found = _match(_segments(request.path))
        if found is None:
            raise not_found()
        handlers, params = found
        method = "GET" if request.method == "HEAD" else request.method
        allowed = ", ".join(sorted({"HEAD", "OPTIONS", *handlers}))
        if method == "OPTIONS":
            return Response(200, b"", None, (("allow", allowed),))
        handler = handlers.get(method)
        if handler is None:
            return Response(405, b"", None, (("allow", allowed),))
        user = await self.context.users.login(request.headers.get("authorization"), request.peer)
        return await handler(Call(self.context, request, user, params))
