"""``/api/definitions[/{vhost}]``: export and import vhosts, permissions, exchanges, queues and
bindings in RabbitMQ's format (``rabbit_definitions``), as ``rabbitmqadmin export|import`` and
CI scripts use it.

Import is idempotent: each item is created unless it exists, through the same calls as the
rest of the API (an inequivalent redeclare is refused with RabbitMQ's 400). Items are applied
in RabbitMQ's order: vhosts, permissions, exchanges, queues, bindings. What the gateway has no
counterpart for is left out of an export and skipped by an import with a log line: users (no
user database: principals come from JWTs and certificates), policies, parameters and topic
permissions. Exclusive queues and the predeclared exchanges are not exported (RabbitMQ
leaves them out too).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.amqp import commands as cmd
from gateway.backend.vhost_admin import VhostError, VhostInvalid
from gateway.management.bindings import binding_json
from gateway.management.context import Call, amqp, check_name
from gateway.management.errors import (
    ApiError,
    Response,
    bad_request,
    json_response,
    unavailable,
)
from gateway.management.exchanges import exchange_json
from gateway.management.fields import arguments, boolean, string
from gateway.management.users import require_admin
from gateway.metadata.permissions import Access, InvalidPermission
from gateway.metadata.store import MetadataUnavailable
from gateway.model.entities import PREDECLARED_EXCHANGES, Binding, ExchangeBinding
from gateway.model.json_values import table_json

log = logging.getLogger("gateway.management")

__all__ = ["export", "import_"]

_PREDECLARED = frozenset(exchange.name for exchange in PREDECLARED_EXCHANGES)
_SKIPPED = ("users", "policies", "parameters", "global_parameters", "topic_permissions")


async def export(call: Call) -> Response:
    require_admin(call.user)
    context = call.context
    if "vhost" in call.params:
        namespace = await call.namespace(call.params["vhost"])
        vhosts = [(call.vhost_name(namespace), namespace)]
    else:
        vhosts = [(info.name, info.namespace) for info in await call.all_vhosts()]
    queues: list[dict[str, Any]] = []
    exchanges: list[dict[str, Any]] = []
    bindings: list[dict[str, Any]] = []
    for vhost, _namespace in vhosts:
        view = (await call.pulsar_vhost(vhost)).catalog.view
        queues.extend(
            {
                "name": queue.name,
                "vhost": vhost,
                "durable": queue.durable,
                "auto_delete": queue.auto_delete,
                "arguments": table_json(queue.arguments),
            }
            for queue in view.queues.values()
            if not queue.exclusive
        )
        exchanges.extend(
            exchange_json(vhost, exchange)
            for exchange in view.exchanges.values()
            if exchange.name not in _PREDECLARED
        )
        every: list[Binding | ExchangeBinding] = [*view.bindings, *view.exchange_bindings]
        for binding in every:
            item = binding_json(vhost, binding)
            item.pop("properties_key")
            bindings.append(item)
    document: dict[str, Any] = {
        "rabbit_version": context.product_version,
        "rabbitmq_version": context.product_version,
        "product_name": "RabbitMQ",
        "product_version": context.product_version,
    }
    for items in (queues, exchanges, bindings):
        items.sort(key=lambda item: [str(value) for value in item.values()])
    if "vhost" in call.params:
        for items in (queues, exchanges, bindings):
            for item in items:
                item.pop("vhost")
        document.update(parameters=[], policies=[])
    else:
        try:
            entries = await context.users.permissions.list()
        except MetadataUnavailable as error:
            raise unavailable(error) from None
        names = {str(namespace): name for name, namespace in vhosts}
        document.update(
            users=[],
            vhosts=[{"name": name} for name, _ in vhosts],
            permissions=[
                {
                    "user": entry.principal,
                    "vhost": names[entry.vhost],
                    **{access.value: entry.permissions.pattern(access) for access in Access},
                }
                for entry in entries
                if entry.vhost in names
            ],
            topic_permissions=[],
            parameters=[],
            global_parameters=[],
            policies=[],
        )
    document.update(queues=queues, exchanges=exchanges, bindings=bindings)
    return json_response(200, document)


def _list(document: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = document.get(key) or []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise bad_request(f"{key} must be a list of objects")
    return items


async def import_(call: Call) -> Response:
    require_admin(call.user)
    document = call.body()
    only = call.params.get("vhost")
    for key in _SKIPPED:
        if document.get(key):
            log.info("definitions import: %s skipped (not kept by the gateway)", key)
    if only is None:
        for item in _list(document, "vhosts"):
            try:
                await call.context.vhosts.add(string(item, "name"))
            except Exception as error:
                raise _refusal(error) from None
        for item in _list(document, "permissions"):
            await _permission(call, item)

    def vhost_of(item: dict[str, Any]) -> str:
        return only if only is not None else string(item, "vhost")

    for item in _list(document, "exchanges"):
        handle = await _vhost(call, vhost_of(item))
        name = string(item, "name")
        if name in _PREDECLARED:
            continue
        await amqp(
            handle.declare_exchange(
                cmd.ExchangeDeclare(
                    exchange=name,
                    type=string(item, "type", "direct"),
                    durable=boolean(item, "durable", True),
                    auto_delete=boolean(item, "auto_delete", False),
                    internal=boolean(item, "internal", False),
                    arguments=arguments(item),
                )
            )
        )
    for item in _list(document, "queues"):
        handle = await _vhost(call, vhost_of(item))
        check_name(string(item, "name"))
        command = cmd.QueueDeclare(
            queue=string(item, "name"),
            durable=boolean(item, "durable", True),
            auto_delete=boolean(item, "auto_delete", False),
            arguments=arguments(item),
        )
        await amqp(handle.declare_queue(command, call.owner()))
    for item in _list(document, "bindings"):
        handle = await _vhost(call, vhost_of(item))
        source = string(item, "source")
        destination = string(item, "destination")
        key = string(item, "routing_key", "")
        if string(item, "destination_type", "queue") == "queue":
            await amqp(
                handle.bind_queue(
                    cmd.QueueBind(destination, source, key, arguments=arguments(item)),
                    call.owner(),
                )
            )
        else:
            await amqp(
                handle.bind_exchange(
                    cmd.ExchangeBind(destination, source, key, arguments=arguments(item))
                )
            )
    return Response(204, content_type=None)


async def _vhost(call: Call, vhost: str) -> Any:
    namespace = await call.namespace(vhost, writing=True)
    return await call.vhost_for_writes(call.vhost_name(namespace))


async def _permission(call: Call, item: dict[str, Any]) -> None:
    namespace = await call.namespace(string(item, "vhost"), writing=True)
    patterns = {access.value: string(item, access.value) for access in Access}
    try:
        await call.context.users.permissions.set(str(namespace), string(item, "user"), **patterns)
    except InvalidPermission as error:
        raise bad_request(str(error)) from None
    except MetadataUnavailable as error:
        raise unavailable(error) from None


def _refusal(error: Exception) -> Exception:
    if isinstance(error, ApiError):
        return error
    if isinstance(error, VhostInvalid):
        return bad_request(str(error))
    if isinstance(error, VhostError):
        return unavailable(error)
    return error
