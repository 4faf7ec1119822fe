"""The AMQP model: vhost mapping, exchange types and routing, queues, bindings, topic naming."""
