"""Connection.Start advertises exactly what the gateway implements."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import kombu
import pika
import pytest
from pamqp import commands, frame

from gateway import __version__ as gateway_version
from gateway.amqp.capabilities import SERVER_CAPABILITIES
from gateway.app import server_settings
from gateway.backend.memory import MemoryBackend
from gateway.config import config_from_text
from gateway.server.address import Listener
from tests.support.clients import amqp_url, connect
from tests.support.gateway_thread import GatewayInThread

IMPLEMENTED = {
    "publisher_confirms",  # Confirm.Select, acks after Pulsar stored the message
    "basic.nack",  # Basic.Nack both ways
    "consumer_cancel_notify",  # Basic.Cancel when a queue is deleted under a consumer
    "connection.blocked",  # Connection.Blocked while Pulsar holds publishes back
    "per_consumer_qos",  # Basic.Qos global=false is per consumer
    "consumer_priorities",  # x-priority on Basic.Consume (test_consumer_priorities.py)
    "authentication_failure_close",  # Connection.Close 403 on a refused login
    "direct_reply_to",  # amq.rabbitmq.reply-to (test_direct_reply_to.py)
    "exchange_exchange_bindings",  # Exchange.Bind/Unbind (test_exchange_bindings.py)
}


@pytest.fixture(scope="module")
def connection() -> Iterator[pika.BlockingConnection]:
    with GatewayInThread(backend=MemoryBackend()) as gateway:
        opened = connect(gateway.port)
        yield opened
        if opened.is_open:
            opened.close()


def test_exactly_the_implemented_capabilities(connection: pika.BlockingConnection) -> None:
    advertised = connection._impl.server_capabilities
    assert advertised == dict.fromkeys(IMPLEMENTED, True)
    assert dict.fromkeys(IMPLEMENTED, True) == SERVER_CAPABILITIES


# ------------------------------------------------------------ product and version (issue 34)

REQUIRED_KEYS = (
    "brokerServiceURL=pulsar://127.0.0.1:6650\n"
    "brokerWebServiceURL=http://127.0.0.1:8080\n"
    "configurationStoreServers=127.0.0.1:2181\n"
)


@contextmanager
def configured_gateway(extra: str = "") -> Iterator[GatewayInThread]:
    """A gateway whose connection settings come from a configuration file's keys."""
    config = config_from_text(REQUIRED_KEYS + extra, {}, source="test.conf")
    settings = dataclasses.replace(
        server_settings(config), listeners=(Listener("amqp", "127.0.0.1", 0),)
    )
    with GatewayInThread(settings, backend=MemoryBackend()) as gateway:
        yield gateway


def test_product_and_version_are_rabbitmqs_by_default() -> None:
    # amqplib's tests assert product "RabbitMQ", amqp091-go's skip for another product, and
    # kombu reads version only when product is "RabbitMQ": then, as against RabbitMQ 3.3 and
    # later, it reports that Basic.Qos's global flag is RabbitMQ's (per channel), and Celery
    # sends global=true, which the gateway honours per channel.
    with configured_gateway() as gateway:
        connection = connect(gateway.port)
        properties = connection._impl.server_properties
        connection.close()
        assert properties["product"] == "RabbitMQ"
        assert properties["version"] == "3.13.7"
        assert properties["starlight_version"] == gateway_version
        with kombu.Connection(amqp_url(gateway.port), connect_timeout=5) as kombu_connection:
            kombu_connection.connect()
            assert kombu_connection.qos_semantics_matches_spec is False


def test_product_and_version_are_configurable() -> None:
    with configured_gateway(
        "amqpServerProduct=Starlight for RabbitMQ\namqpServerVersion=4.1.0\n"
    ) as gateway:
        connection = connect(gateway.port)
        properties = connection._impl.server_properties
        connection.close()
        assert (properties["product"], properties["version"]) == (
            "Starlight for RabbitMQ",
            "4.1.0",
        )
        with kombu.Connection(amqp_url(gateway.port), connect_timeout=5) as kombu_connection:
            kombu_connection.connect()
            # Not "RabbitMQ": kombu assumes the spec's Basic.Qos semantics.
            assert kombu_connection.qos_semantics_matches_spec is True


# ------------------------------------------------------- SASL mechanisms and channel-max


def test_amqplain_is_offered_beside_plain_without_authentication() -> None:
    # RabbitMQ offers PLAIN and AMQPLAIN. Without authentication (the reference's default) any
    # credentials are let in, so AMQPLAIN, PLAIN's credentials in a field table, is offered too:
    # clients that log in with it (py-amqp prefers it, php-amqplib's default, amqp091-go's
    # AMQPlainAuth) find it offered. channel-max stays the reference's amqpSessionCountLimit.
    with configured_gateway() as gateway:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            received = b""
            while len(received) < 7 or len(received) < 8 + int.from_bytes(received[3:7], "big"):
                chunk = sock.recv(65536)
                assert chunk, "the gateway closed before Connection.Start"
                received += chunk
        _, _, start = frame.unmarshal(received)
        assert isinstance(start, commands.Connection.Start)
        assert start.mechanisms == "PLAIN AMQPLAIN"
        with kombu.Connection(
            amqp_url(gateway.port), login_method="AMQPLAIN", connect_timeout=5
        ) as kombu_connection:
            kombu_connection.connect()
            assert kombu_connection.connection.server_properties["product"] == "RabbitMQ"
            channel = kombu_connection.channel()
            assert channel.channel_id == 1
            channel.close()
        connection = connect(gateway.port)
        assert connection._impl.params.channel_max == 256  # amqpSessionCountLimit, reference
        connection.close()
