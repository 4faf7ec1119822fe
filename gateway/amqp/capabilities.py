"""``server_properties`` for Connection.Start: who we are and what we support.

Clients read this table (NOTES, "What real clients check in Connection.Start"):

* pika's ``confirm_delivery`` needs both ``publisher_confirms`` and ``basic.nack``; aiormq
  needs a ``capabilities`` table and opens confirm channels by default.
* ``product`` is ``"RabbitMQ"`` unless configured otherwise (amqpServerProduct): kombu/Celery
  (``qos_semantics_matches_spec``) look at ``version`` only for that product, and otherwise
  assume the spec's Basic.Qos semantics; amqplib's tests assert it, amqp091-go's skip their
  body for another product (docs/compatibility.md, "Product and version").
* The Java client's version-gated code and tests read ``version`` (amqpServerVersion): a
  RabbitMQ version, and our own version under ``starlight_version``.

Advertised is exactly what the gateway implements (a client that sees a capability uses it):
nothing false is listed, as RabbitMQ lists only what it has. ``consumer_priorities`` is
``x-priority`` on Basic.Consume (docs/compatibility.md, "Consumer priorities").
``direct_reply_to`` is RabbitMQ's name for ``amq.rabbitmq.reply-to`` (backend/replies.py);
``exchange_exchange_bindings`` says that Exchange.Bind and Exchange.Unbind work
(docs/compatibility.md, "Exchange-to-exchange bindings").
"""

from __future__ import annotations

import platform
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.amqp.connection_settings import ConnectionSettings

__all__ = ["SERVER_CAPABILITIES", "server_properties"]

SERVER_CAPABILITIES: dict[str, bool] = {
    "publisher_confirms": True,
    "basic.nack": True,
    "consumer_cancel_notify": True,
    "connection.blocked": True,
    "per_consumer_qos": True,
    "consumer_priorities": True,
    "authentication_failure_close": True,
    "direct_reply_to": True,
    "exchange_exchange_bindings": True,
}

_PLATFORM = f"Python {platform.python_version()}"


def server_properties(settings: ConnectionSettings) -> dict[str, Any]:
    props: dict[str, Any] = {
        "product": settings.product,
        "version": settings.version,
        "starlight_version": settings.gateway_version,
        "platform": settings.platform or _PLATFORM,
        "copyright": settings.copyright,
        "information": settings.information,
        "capabilities": dict(SERVER_CAPABILITIES),
    }
    if settings.cluster_name:
        props["cluster_name"] = settings.cluster_name
    return props
