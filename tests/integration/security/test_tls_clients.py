"""Real clients (pika, aio-pika, py-amqp) over TLS against a gateway with authentication on:
PLAIN/AMQPLAIN with a JWT, EXTERNAL with a client certificate, and the refusals."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Iterator
from pathlib import Path

import aio_pika
import aiormq.exceptions
import amqp
import pika
import pika.credentials
import pika.exceptions
import pytest

from tests.integration.security.secured import (
    Secured,
    assert_no_traceback,
    secured_gateway,
    wait_closed_line,
)


@pytest.fixture
def secured(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Secured]:
    caplog.set_level(logging.INFO)
    with secured_gateway(tmp_path) as running:
        yield running


def pika_tls(
    secured: Secured,
    *,
    credentials: pika.credentials.VALID_TYPES | None = None,
    context: ssl.SSLContext | None = None,
    port: int | None = None,
) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=port or secured.tls_port,
        credentials=credentials or pika.PlainCredentials("ignored", secured.token()),
        ssl_options=pika.SSLOptions(context or secured.pki.client_context(), "localhost"),
        connection_attempts=1,
        socket_timeout=5,
        blocked_connection_timeout=5,
    )


def round_trip(connection: pika.BlockingConnection) -> None:
    """Declare, publish and get one message: the connection is really usable."""
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"over tls")
    for _ in range(100):
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            assert body == b"over tls"
            return
        connection.sleep(0.02)
    raise AssertionError("message not delivered")


# ------------------------------------------------------------------------- PLAIN + JWT


def test_pika_plain_jwt_over_tls(secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    connection = pika.BlockingConnection(pika_tls(secured))
    try:
        round_trip(connection)
        [server_side] = secured.connections()
        assert server_side.user == "alice"
    finally:
        connection.close()
    assert "user=alice" in wait_closed_line(caplog, "closed by client")
    assert_no_traceback(caplog)


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"exp": 1}, "the token has expired"),
        ({"nbf": 4_000_000_000}, "not valid yet"),
        ({"sub": None}, "no 'sub' claim"),
    ],
)
def test_pika_refused_token_gets_403_with_the_reason(
    secured: Secured, caplog: pytest.LogCaptureFixture, claims: dict[str, object], reason: str
) -> None:
    token = secured.token(**claims)  # type: ignore[arg-type]
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
        pika.BlockingConnection(pika_tls(secured, credentials=pika.PlainCredentials("u", token)))
    assert "ACCESS_REFUSED" in str(refused.value) and reason in str(refused.value)
    line = wait_closed_line(caplog, "authentication failed")
    assert reason in line
    assert_no_traceback(caplog)


def test_pika_garbage_password_and_bad_signature(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    for password, reason in (
        ("guest", "the password is not a JWT"),
        (secured.token()[:-4] + "AAAA", "signature does not verify"),
    ):
        credentials = pika.PlainCredentials("guest", password)
        with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
            pika.BlockingConnection(pika_tls(secured, credentials=credentials))
        assert reason in str(refused.value)
    assert_no_traceback(caplog)


def test_aio_pika_plain_jwt_over_tls(secured: Secured) -> None:
    async def scenario() -> str:
        connection = await aio_pika.connect(
            f"amqps://ignored:{secured.token('bob')}@127.0.0.1:{secured.tls_port}/",
            ssl_context=secured.pki.client_context(),
            timeout=5,
        )
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"hi"), queue.name)
            message = await queue.get(timeout=5, fail=False)
            for _ in range(100):
                if message is not None:
                    break
                await asyncio.sleep(0.02)
                message = await queue.get(timeout=5, fail=False)
            assert message is not None
            await message.ack()
            return message.body.decode()

    assert asyncio.run(scenario()) == "hi"


def test_aio_pika_bad_token_is_refused(secured: Secured) -> None:
    async def scenario() -> None:
        await aio_pika.connect(
            f"amqps://ignored:not-a-token@127.0.0.1:{secured.tls_port}/",
            ssl_context=secured.pki.client_context(),
            timeout=5,
        )

    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError) as refused:
        asyncio.run(scenario())
    assert "not a JWT" in str(refused.value)


def test_py_amqp_amqplain_jwt_over_tls(secured: Secured) -> None:
    connection = amqp.Connection(
        f"127.0.0.1:{secured.tls_port}",
        userid="ignored",
        password=secured.token("carol"),
        login_method="AMQPLAIN",
        # py-amqp builds its own context from these options (kombu's ssl= form).
        ssl={
            "ca_certs": str(secured.pki.ca.cert_path),
            "cert_reqs": ssl.CERT_REQUIRED,
            "server_hostname": "localhost",
        },
        connect_timeout=5,
    )
    connection.connect()
    try:
        [server_side] = secured.connections()
        assert server_side.user == "carol"
        connection.channel().close()
    finally:
        connection.close()


# ------------------------------------------------------------------------- EXTERNAL


def test_pika_external_with_a_trusted_certificate(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    parameters = pika_tls(
        secured,
        credentials=pika.credentials.ExternalCredentials(),
        context=secured.pki.client_context(secured.pki.alice),
    )
    connection = pika.BlockingConnection(parameters)
    try:
        round_trip(connection)
        [server_side] = secured.connections()
        assert server_side.user == "alice"
        assert server_side.peer.tls_common_name == "alice"
    finally:
        connection.close()
    assert_no_traceback(caplog)


def test_pika_external_without_a_certificate_is_refused(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    parameters = pika_tls(secured, credentials=pika.credentials.ExternalCredentials())
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
        pika.BlockingConnection(parameters)
    assert "verified client certificate" in str(refused.value)
    wait_closed_line(caplog, "authentication mechanism EXTERNAL")
    assert_no_traceback(caplog)


def test_aio_pika_external(secured: Secured) -> None:
    async def scenario() -> None:
        connection = await aio_pika.connect(
            f"amqps://127.0.0.1:{secured.tls_port}/?auth=external",
            ssl_context=secured.pki.client_context(secured.pki.alice),
            timeout=5,
        )
        async with connection:
            channel = await connection.channel()
            await channel.declare_queue(exclusive=True)

    asyncio.run(scenario())


def test_untrusted_client_certificate_fails_the_tls_handshake(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    parameters = pika_tls(
        secured,
        credentials=pika.credentials.ExternalCredentials(),
        context=secured.pki.client_context(secured.pki.untrusted),
    )
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(parameters)
    line = wait_closed_line(caplog, "TLS handshake failed")
    assert "client certificate not trusted" in line
    assert_no_traceback(caplog)


def test_external_over_the_plaintext_port_is_refused(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    parameters = pika.ConnectionParameters(
        host="127.0.0.1",
        port=secured.plain_port,
        credentials=pika.credentials.ExternalCredentials(),
        connection_attempts=1,
        socket_timeout=5,
    )
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        pika.BlockingConnection(parameters)
    assert_no_traceback(caplog)


def test_plain_jwt_works_on_the_plaintext_port_too(secured: Secured) -> None:
    parameters = pika.ConnectionParameters(
        host="127.0.0.1",
        port=secured.plain_port,
        credentials=pika.PlainCredentials("ignored", secured.token()),
        connection_attempts=1,
        socket_timeout=5,
    )
    connection = pika.BlockingConnection(parameters)
    connection.close()
