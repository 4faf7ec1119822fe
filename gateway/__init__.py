"""Starlight for RabbitMQ: an AMQP 0-9-1 gateway running RabbitMQ applications on Apache Pulsar."""

__version__ = "0.1.0"
