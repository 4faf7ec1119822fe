"""The AMQP model: vhost mapping, exchange types and routing, queues, bindings, topic naming.

Pure functions and frozen dataclasses, no I/O; imports only the stdlib and ``gateway.amqp``.
docs/mapping.md is the specification.

- ``vhost``: ``VhostMapper.namespace_for(vhost)`` → ``Namespace`` (or 530 ``InvalidVhost``).
- ``naming``: reversible topic and subscription names, server-named queues.
- ``entities``: ``Exchange``, ``Queue``, ``Binding``, ``ExchangeType``, the predeclared
  exchanges, and RabbitMQ's declare/delete/bind/equivalence rules with its reply texts.
- ``routing``: direct/fanout/topic/headers matching and the per-exchange ``Router``.
- ``values``: AMQP field values compared and printed the way RabbitMQ does.
"""
