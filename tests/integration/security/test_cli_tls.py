"""The ``starlight-rabbitmq`` command with an amqps listener and authentication, as a user runs
it: a real process on the local stack, real clients, SIGTERM; and bad key material as a
one-line configuration error."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pika
import pika.credentials
import pika.exceptions
import pytest

from tests.support.cli import COMMAND, REPO, free_port, run, wait_for_port, write_config
from tests.support.pki import Pki, make_pki, token_keys


def secured_config(tmp_path: Path, pki: Pki, tls_port: int, plain_port: int) -> Path:
    public_key = tmp_path / "token-public.pem"
    public_key.write_bytes(token_keys().public_pem(token_keys().rsa))
    return write_config(
        tmp_path,
        f"tlsCertificateFilePath={pki.server.cert_path}\n"
        f"tlsKeyFilePath={pki.server.key_path}\n"
        f"tlsTrustCertsFilePath={pki.ca.cert_path}\n"
        "authenticationEnabled=true\n"
        "amqpAuthenticationMechanisms=PLAIN,EXTERNAL\n"
        f"tokenPublicKey=file://{public_key}\n"
        "tokenAudienceClaim=aud\ntokenAudience=starlight\n",
        port=plain_port,
    )


@pytest.fixture
def tls_gateway(
    tmp_path: Path, pulsar_stack: object
) -> Iterator[tuple[subprocess.Popen[str], Pki, int]]:
    pki = make_pki(tmp_path / "pki")
    tls_port, plain_port = free_port(), free_port()
    config = secured_config(tmp_path, pki, tls_port, plain_port)
    config.write_text(
        config.read_text().replace(
            f"amqpListeners=amqp://127.0.0.1:{plain_port}",
            f"amqpListeners=amqps://127.0.0.1:{tls_port},amqp://127.0.0.1:{plain_port}",
        )
    )
    process = subprocess.Popen(
        [*COMMAND, "-c", str(config)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for_port(tls_port, process)
        yield process, pki, tls_port
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()


def rs256(sub: str, audience: str = "starlight") -> str:
    return jwt.encode({"sub": sub, "aud": audience}, token_keys().rsa, algorithm="RS256")


@pytest.mark.integration
def test_amqps_with_jwt_and_external_through_the_command(
    tls_gateway: tuple[subprocess.Popen[str], Pki, int],
) -> None:
    process, pki, port = tls_gateway

    def parameters(
        credentials: pika.credentials.VALID_TYPES, client: object = None
    ) -> pika.ConnectionParameters:
        context = pki.client_context(client)  # type: ignore[arg-type]
        return pika.ConnectionParameters(
            host="127.0.0.1",
            port=port,
            credentials=credentials,
            ssl_options=pika.SSLOptions(context, "localhost"),
            connection_attempts=1,
            socket_timeout=10,
        )

    by_token = pika.BlockingConnection(parameters(pika.PlainCredentials("x", rs256("app"))))
    by_token.channel()
    by_certificate = pika.BlockingConnection(
        parameters(pika.credentials.ExternalCredentials(), pki.alice)
    )
    by_certificate.channel()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError) as refused:
        pika.BlockingConnection(parameters(pika.PlainCredentials("x", rs256("app", "other"))))
    assert "audience" in str(refused.value)

    os.kill(process.pid, signal.SIGTERM)
    for connection in (by_token, by_certificate):
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                connection.process_data_events(time_limit=0.1)
        assert closed.value.reply_code == 320
    output, _ = process.communicate(timeout=20)
    assert process.returncode == 0, output
    assert f"listening on amqps://127.0.0.1:{port}" in output
    assert "user=app" in output and "user=alice" in output
    assert "audience" in output  # the refusal's reason, logged
    assert "Traceback" not in output


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
@pytest.mark.parametrize(
    ("broken", "named"),
    [
        ("tlsCertificateFilePath=/nonexistent/server.crt", "tlsCertificateFilePath"),
        ("tokenPublicKey=file:///nonexistent/public.pem", "tokenPublicKey"),
    ],
)
def test_bad_key_material_is_one_line_naming_the_key(
    tmp_path: Path, broken: str, named: str, workers: list[str]
) -> None:
    pki = make_pki(tmp_path / "pki")
    tls_port, plain_port = free_port(), free_port()
    config = secured_config(tmp_path, pki, tls_port, plain_port)
    text = config.read_text().replace(
        f"amqpListeners=amqp://127.0.0.1:{plain_port}",
        f"amqpListeners=amqps://127.0.0.1:{tls_port}",
    )
    key = broken.partition("=")[0]
    text = "\n".join(line for line in text.splitlines() if not line.startswith(key + "="))
    config.write_text(text + "\n" + broken + "\n")
    result = run(["-c", str(config), *workers])
    assert result.returncode == 2, result.stderr
    assert named in result.stderr and "/nonexistent/" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
