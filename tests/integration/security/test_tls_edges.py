"""What goes wrong on the wire, over real loopback sockets: the wrong protocol on either port,
garbage SASL responses, slow handshakes, refused clients, certificates replaced on disk, and
repeated failures from one address."""

from __future__ import annotations

import logging
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pika.exceptions
import pytest
from cryptography import x509
from pamqp import commands, frame
from pamqp.exceptions import UnmarshalingException

from gateway.amqp.fieldtable import encode_table
from tests.integration.security.secured import (
    Secured,
    assert_no_traceback,
    auth_config,
    closed_lines,
    secured_gateway,
    start,
    tls_config,
    tls_socket,
    wait_closed_line,
    wait_until,
)
from tests.support.pki import make_pki, token_keys

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


@pytest.fixture
def secured(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Secured]:
    caplog.set_level(logging.INFO)
    with secured_gateway(tmp_path, handshake_timeout=1.0) as running:
        yield running


class RawClient:
    """Just enough AMQP over a blocking (TLS) socket to send exact Start-Ok responses."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def receive(self) -> object | None:
        """The next frame, or None when the server closed the connection."""
        while True:
            if self.buffer:
                try:
                    consumed, _channel, value = frame.unmarshal(self.buffer)
                except UnmarshalingException:
                    pass
                else:
                    self.buffer = self.buffer[consumed:]
                    return value
            try:
                data = self.sock.recv(65536)
            except (ConnectionError, ssl.SSLError):
                data = b""
            if not data:
                return None
            self.buffer += data

    def start_ok(self, mechanism: str, response: str | bytes, capabilities: bool) -> object | None:
        self.sock.sendall(PROTOCOL_HEADER)
        assert isinstance(self.receive(), commands.Connection.Start)
        caps = {"authentication_failure_close": True} if capabilities else {}
        method = commands.Connection.StartOk(
            client_properties={"capabilities": caps}, mechanism=mechanism, response=""
        )
        # pamqp only marshals str responses; AMQPLAIN's is binary, so build it by hand.
        payload = method.marshal()
        raw = response.encode("latin-1") if isinstance(response, str) else response
        empty = b"\x00\x00\x00\x00"
        head, _, tail = payload.rpartition(empty + b"\x05en_US")
        payload = head + len(raw).to_bytes(4, "big") + raw + b"\x05en_US" + tail
        body = (0x000A000B).to_bytes(4, "big") + payload
        self.sock.sendall(b"\x01\x00\x00" + len(body).to_bytes(4, "big") + body + b"\xce")
        return self.receive()


def raw_login(
    secured: Secured,
    mechanism: str,
    response: str | bytes,
    *,
    capabilities: bool = True,
    source: str = "127.0.0.1",
) -> object | None:
    with tls_socket(secured.tls_port, secured.pki.client_context(), source) as sock:
        return RawClient(sock).start_ok(mechanism, response, capabilities)


# ------------------------------------------------------------------------- wrong protocol


def test_plaintext_amqp_on_the_tls_port(secured: Secured, caplog: pytest.LogCaptureFixture) -> None:
    parameters = pika.ConnectionParameters(
        host="127.0.0.1", port=secured.tls_port, connection_attempts=1, socket_timeout=5
    )
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        pika.BlockingConnection(parameters)
    line = wait_closed_line(caplog, "TLS handshake failed")
    assert "not a TLS client hello" in line
    assert_no_traceback(caplog)


def test_tls_on_the_plaintext_port_gets_the_amqp_header(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_socket(secured.plain_port, secured.pki.client_context()).close()
    # What the server answered: AMQP's own header (spec 4.2.2), then it closed.
    with socket.create_connection(("127.0.0.1", secured.plain_port), timeout=5) as sock:
        sock.sendall(b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03")
        answer = b""
        while chunk := sock.recv(100):
            answer += chunk
    assert answer == PROTOCOL_HEADER
    # One close line per attempt: the TLS client's and the raw one.
    wait_until(lambda: len(closed_lines(caplog)) == 2)
    assert all("unsupported protocol header b'\\x16\\x03" in line for line in closed_lines(caplog))
    assert_no_traceback(caplog)


# ------------------------------------------------------------------------- garbage SASL


@pytest.mark.parametrize(
    ("mechanism", "response"),
    [
        ("PLAIN", "no-nul-separators"),
        ("PLAIN", "\0user\0"),
        ("PLAIN", "\0user\0eyJhbGciOiJIUzI1NiJ9.e30.bad"),
        ("PLAIN", b"\0user\0\xff\xfe\xfd"),
        ("AMQPLAIN", b"\x05LOGIN"),
        ("AMQPLAIN", encode_table({"LOGIN": "u"})[4:]),
        ("AMQPLAIN", b"\xff" * 40),
    ],
)
def test_garbage_sasl_response_gets_403_and_one_log_line(
    secured: Secured, caplog: pytest.LogCaptureFixture, mechanism: str, response: str | bytes
) -> None:
    answer = raw_login(secured, mechanism, response)
    assert isinstance(answer, commands.Connection.Close)
    assert answer.reply_code == 403
    assert answer.reply_text.startswith(
        f"ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}: "
    )
    wait_closed_line(caplog, "authentication failed")
    assert_no_traceback(caplog)


def test_a_client_without_authentication_failure_close_just_sees_the_socket_close(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    assert raw_login(secured, "PLAIN", "\0u\0nope", capabilities=False) is None
    wait_closed_line(caplog, "authentication failed")
    assert_no_traceback(caplog)


def test_a_mechanism_that_is_not_offered(secured: Secured) -> None:
    answer = raw_login(secured, "SCRAM-SHA-256", "x")
    assert isinstance(answer, commands.Connection.Close)
    assert answer.reply_code == 503


# ------------------------------------------------------------------------- slow handshakes


def test_slow_loris_tls_connection_is_closed_at_the_deadline(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", secured.tls_port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01")  # a ClientHello that never comes
        assert sock.recv(100) == b""
    assert 0.9 <= time.monotonic() - started < 5
    wait_closed_line(caplog, "TLS handshake not completed in time")
    assert_no_traceback(caplog)


def test_tls_then_silence_is_closed_at_the_same_deadline(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    with tls_socket(secured.tls_port, secured.pki.client_context()) as sock:
        sock.sendall(PROTOCOL_HEADER)
        client = RawClient(sock)
        assert isinstance(client.receive(), commands.Connection.Start)
        assert client.receive() is None
    assert 0.9 <= time.monotonic() - started < 5
    wait_closed_line(caplog, "reason=handshake not completed in time")


# ------------------------------------------------------------------------- throttling


def test_repeated_failures_from_one_address_do_not_slow_others(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(4):  # two free failures, then 0.25 s and 0.5 s
        raw_login(secured, "PLAIN", "\0u\0garbage", source="127.0.0.1")
    started = time.monotonic()
    answer = raw_login(secured, "PLAIN", "\0u\0garbage", source="127.0.0.1")
    delayed = time.monotonic() - started
    assert isinstance(answer, commands.Connection.Close)
    assert delayed >= 0.45  # 1 s would be next, capped at half the 1 s handshake deadline
    # Another address fails at once, and a good login from the failing one too.
    started = time.monotonic()
    raw_login(secured, "PLAIN", "\0u\0garbage", source="127.0.0.2")
    assert time.monotonic() - started < 0.4
    started = time.monotonic()
    answer = raw_login(secured, "PLAIN", f"\0u\0{secured.token()}", source="127.0.0.1")
    assert isinstance(answer, commands.Connection.Tune)
    assert time.monotonic() - started < 0.4
    assert_no_traceback(caplog)


# ------------------------------------------------------------------------- certificates


def server_serial(port: int, context: ssl.SSLContext) -> int:
    with tls_socket(port, context) as sock:
        der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_replaced_certificate_is_used_for_new_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pki = make_pki(tmp_path / "pki")
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(pki.server.cert_path, live / "server.crt")
    shutil.copy(pki.server.key_path, live / "server.key")
    text = (
        f"tlsCertificateFilePath={live / 'server.crt'}\ntlsKeyFilePath={live / 'server.key'}\n"
        "tlsCertRefreshCheckDurationSec=0\n"
    )
    running = start(pki, text)
    try:
        context = pki.client_context()
        kept = pika.BlockingConnection(
            pika.ConnectionParameters(
                host="127.0.0.1",
                port=running.tls_port,
                ssl_options=pika.SSLOptions(context, "localhost"),
                connection_attempts=1,
            )
        )
        assert server_serial(running.tls_port, context) == pki.server.serial
        fresh = pki.ca.issue("localhost", "fresh", server=True)
        for source, name in ((fresh.key_path, "server.key"), (fresh.cert_path, "server.crt")):
            shutil.copy(source, live / f"{name}.tmp")
            (live / f"{name}.tmp").rename(live / name)
        assert server_serial(running.tls_port, context) == fresh.serial
        assert any("TLS certificate reloaded" in r.getMessage() for r in caplog.records)
        # The connection accepted with the old certificate goes on working.
        kept.channel().close()
        kept.close()
    finally:
        running.gateway.stop()
    assert_no_traceback(caplog)


def test_pkcs12_stores_and_a_required_client_certificate(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pki = make_pki(tmp_path / "pki")
    text = (
        "tlsEnabledWithKeyStore=true\n"
        f"tlsKeyStore={pki.key_store('keypass')}\ntlsKeyStorePassword=keypass\n"
        f"tlsTrustStore={pki.trust_store('trustpass')}\ntlsTrustStorePassword=trustpass\n"
        "tlsRequireTrustedClientCertOnConnect=true\n" + auth_config(token_keys(), "EXTERNAL")
    )
    running = start(pki, text)
    try:

        def external(context: ssl.SSLContext) -> pika.ConnectionParameters:
            return pika.ConnectionParameters(
                host="127.0.0.1",
                port=running.tls_port,
                credentials=pika.credentials.ExternalCredentials(),
                ssl_options=pika.SSLOptions(context, "localhost"),
                connection_attempts=1,
                socket_timeout=5,
            )

        connection = pika.BlockingConnection(external(pki.client_context(pki.alice)))
        assert [c.user for c in running.connections()] == ["alice"]
        connection.close()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(external(pki.client_context()))
        wait_closed_line(caplog, "TLS handshake failed")
    finally:
        running.gateway.stop()
    assert_no_traceback(caplog)


def test_insecure_connection_lets_an_untrusted_certificate_in_but_not_as_identity(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    pki = make_pki(tmp_path / "pki")
    running = start(
        pki,
        tls_config(pki) + auth_config(token_keys()) + "tlsAllowInsecureConnection=true\n",
    )
    try:
        parameters = pika.ConnectionParameters(
            host="127.0.0.1",
            port=running.tls_port,
            credentials=pika.PlainCredentials("u", running.token("bob")),
            ssl_options=pika.SSLOptions(pki.client_context(pki.untrusted), "localhost"),
            connection_attempts=1,
            socket_timeout=5,
        )
        connection = pika.BlockingConnection(parameters)
        [server_side] = running.connections()
        assert server_side.user == "bob"
        assert server_side.peer.tls_common_name is None
        connection.close()
        wait_until(lambda: not running.connections())
    finally:
        running.gateway.stop()
