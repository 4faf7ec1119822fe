"""The connection shell over TLS (in-memory streams, autojump clock): the TLS handshake under the
handshake deadline, its failures as one close reason, the certificate CN reaching the
authenticator, and the per-address delay of repeated login failures."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from gateway.amqp.connection import ConnectionSettings
from gateway.amqp.errors import ReplyCode
from gateway.auth.authenticator import AuthenticationFailed, Authenticator, PeerIdentity
from gateway.auth.mechanisms import ExternalAuthenticator, SaslAuthenticator
from gateway.auth.throttle import FailureThrottle
from gateway.auth.tls_context import ClientCertificates, TlsSettings, build_server_context
from gateway.backend.unsupported import UnsupportedBackend
from gateway.server.connection import ClientConnection
from gateway.server.settings import ServerSettings
from tests.support.pki import Pki, make_pki
from tests.support.scripted_client import PROTOCOL_HEADER, ScriptedClient, commands


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server_context(pki: Pki) -> ssl.SSLContext:
    return build_server_context(
        TlsSettings(
            certificate_file=str(pki.server.cert_path),
            key_file=str(pki.server.key_path),
            trust_certs_file=str(pki.ca.cert_path),
            client_certificates=ClientCertificates.OPTIONAL,
        )
    )


class Refuse:
    async def authenticate(self, mechanism: str, response: bytes, peer: PeerIdentity) -> str:
        raise AuthenticationFailed("Login was refused using authentication mechanism PLAIN: no")


@asynccontextmanager
async def served(
    server_context: ssl.SSLContext,
    client_context: ssl.SSLContext | None,
    *,
    authenticator: Authenticator | None = None,
    settings: ServerSettings | None = None,
    throttle: FailureThrottle | None = None,
    address: str = "10.0.0.1:4000",
) -> AsyncIterator[tuple[trio.abc.Stream, ClientConnection]]:
    """A connection on an amqps stream; the client side is TLS unless client_context is None."""
    client_raw, server_raw = trio.testing.memory_stream_pair()
    connection = ClientConnection(
        trio.SSLStream(server_raw, server_context, server_side=True),
        settings or ServerSettings(connection=ConnectionSettings(mechanisms=("PLAIN", "EXTERNAL"))),
        authenticator or SaslAuthenticator({"EXTERNAL": ExternalAuthenticator()}),
        UnsupportedBackend(),
        PeerIdentity(address),
        throttle=throttle,
    )
    client: trio.abc.Stream = client_raw
    if client_context is not None:
        client = trio.SSLStream(client_raw, client_context, server_hostname="localhost")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.run)
        yield client, connection
        with trio.fail_after(60):
            await connection.finished.wait()


async def login(client: trio.abc.Stream, mechanism: str, response: str = "") -> object:
    """Header and Start-Ok; the server's answer (Tune or Close), or None when it hung up."""
    scripted = ScriptedClient(client)
    await scripted.send_raw(PROTOCOL_HEADER)
    await scripted.expect(commands.Connection.Start)
    await scripted.send(
        commands.Connection.StartOk(
            client_properties={"capabilities": {"authentication_failure_close": True}},
            mechanism=mechanism,
            response=response,
        )
    )
    try:
        return (await scripted.receive())[1]
    except (EOFError, trio.BrokenResourceError):
        return None


async def test_external_gets_the_certificate_common_name(
    pki: Pki, server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    async with served(server_context, pki.client_context(pki.alice)) as (client, connection):
        answer = await login(client, "EXTERNAL")
        assert isinstance(answer, commands.Connection.Tune)
        assert connection.peer.tls_common_name == "alice"
        assert connection.user == "alice"
        await trio.aclose_forcefully(client)


async def test_external_without_a_certificate_gets_403(
    pki: Pki, server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    async with served(server_context, pki.client_context()) as (client, connection):
        answer = await login(client, "EXTERNAL")
        assert isinstance(answer, commands.Connection.Close)
        assert answer.reply_code == ReplyCode.ACCESS_REFUSED
        assert "verified client certificate" in answer.reply_text
        await trio.aclose_forcefully(client)
    assert connection.close_reason is not None
    assert connection.close_reason.startswith("authentication failed: ")


async def test_slow_loris_tls_is_cut_at_the_handshake_deadline(
    server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    settings = ServerSettings(handshake_timeout=5)
    async with served(server_context, None, settings=settings) as (client, connection):
        started = trio.current_time()
        await client.send_all(b"\x16\x03\x01")  # the start of a ClientHello, then nothing
        assert await client.receive_some(100) == b""
        assert 5 <= trio.current_time() - started < 6
    assert connection.close_reason == "TLS handshake not completed in time"


async def test_a_client_that_never_finishes_amqp_over_tls_is_cut_too(
    pki: Pki, server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    settings = ServerSettings(handshake_timeout=5)
    async with served(server_context, pki.client_context(), settings=settings) as (client, conn):
        started = trio.current_time()
        await client.send_all(PROTOCOL_HEADER)
        # Start arrives, then the connection ends (a TLS EOF or a broken stream).
        with contextlib.suppress(trio.BrokenResourceError):
            while await client.receive_some(1000):
                pass
        assert 5 <= trio.current_time() - started < 6
    assert conn.close_reason == "handshake not completed in time"


async def test_plaintext_amqp_on_a_tls_port(
    server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    async with served(server_context, None) as (client, connection):
        await client.send_all(PROTOCOL_HEADER)
        while await client.receive_some(1000):
            pass  # OpenSSL may answer with an alert; then the socket closes
    assert connection.close_reason is not None
    assert connection.close_reason.startswith("TLS handshake failed: not a TLS client hello")


async def test_untrusted_client_certificate(
    pki: Pki, server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    async with served(server_context, pki.client_context(pki.untrusted)) as (client, connection):
        # With TLS 1.3 the client learns of the refusal only when it next reads or writes.
        answer: object = None
        with contextlib.suppress(trio.BrokenResourceError):
            answer = await login(client, "EXTERNAL")
        assert answer is None
    assert connection.close_reason is not None
    assert connection.close_reason.startswith(
        "TLS handshake failed: client certificate not trusted"
    )


async def refusal_time(
    server_context: ssl.SSLContext, pki: Pki, throttle: FailureThrottle, address: str
) -> float:
    async with served(
        server_context,
        pki.client_context(),
        authenticator=Refuse(),
        throttle=throttle,
        address=address,
    ) as (client, _connection):
        started = trio.current_time()
        answer = await login(client, "PLAIN", "\0u\0p")
        assert isinstance(answer, commands.Connection.Close)
        elapsed = trio.current_time() - started
        await trio.aclose_forcefully(client)
    return elapsed


async def test_repeated_failures_are_delayed_for_that_address_only(
    pki: Pki, server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    throttle = FailureThrottle(free_failures=2, first_delay=0.25, max_delay=2.0)
    times = [await refusal_time(server_context, pki, throttle, "10.0.0.1:1") for _ in range(5)]
    assert times[0] < 0.1 and times[1] < 0.1
    assert [round(t, 2) for t in times[2:]] == [0.25, 0.5, 1.0]
    assert await refusal_time(server_context, pki, throttle, "10.0.0.2:1") < 0.1


async def test_the_delay_never_outlasts_the_handshake_deadline(
    pki: Pki, server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    throttle = FailureThrottle(free_failures=0, first_delay=60.0, max_delay=60.0)
    assert await refusal_time(server_context, pki, throttle, "10.0.0.3:1") < 10


async def test_a_client_that_hangs_up_before_the_tls_handshake(
    server_context: ssl.SSLContext, autojump_clock: trio.abc.Clock
) -> None:
    # A load balancer's TCP health check, for instance: one quiet line, no traceback.
    async with served(server_context, None) as (client, connection):
        await client.aclose()
    assert connection.close_reason == (
        "TLS handshake failed: client closed the connection during the handshake"
    )
