"""`helm test`'s hook and the HPA's CPU request, rendered with the chart's helm.

The hook pod cannot run here (no kubelet), so its rendered command is run instead: the same
Python, with the Service's address swapped for a gateway on the local stack
(test_the_hook_script_passes_against_a_real_gateway), and against a port that is not AMQP.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.starlight_rabbitmq_chart.rendering import Manifest, documents
from tests.starlight_rabbitmq_chart.tools import CHART_DIR, Helm
from tests.support.gateway_process import GatewayProcess, free_port, write_stack_config
from tests.support.pulsar_gateway import fresh_namespace

HOOK_SCRIPT = CHART_DIR / "files" / "connection_check.py"


def _hook_pods(rendered: str) -> list[Manifest]:
    return [
        doc
        for doc in documents(rendered)
        if doc["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
    ]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_helmignore_keeps_the_test_hook_in_the_packaged_chart(helm: Helm, tmp_path: Path) -> None:
    """`helm package` applies .helmignore: the hook must be in the archive (`helm test` said
    `TEST SUITE: None` while a bare `tests/` pattern dropped templates/tests/), and
    helm-unittest's suites at the chart's root must not."""
    helm.run("package", CHART_DIR, "--destination", tmp_path)
    (archive,) = tmp_path.glob("starlight-rabbitmq-*.tgz")
    listing = subprocess.run(
        ["tar", "-tzf", str(archive)], check=True, capture_output=True, text=True
    ).stdout.split()
    assert "starlight-rabbitmq/templates/tests/test-connection.yaml" in listing
    assert "starlight-rabbitmq/files/connection_check.py" in listing
    assert not [name for name in listing if name.startswith("starlight-rabbitmq/tests/")]


def test_the_hook_pod_runs_the_connection_check_with_the_gateway_image(helm: Helm) -> None:
    (pod,) = _hook_pods(helm.template("--set", "image.tag=9.9.9"))
    assert pod["kind"] == "Pod"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    (deployment,) = [
        d for d in documents(helm.template("--set", "image.tag=9.9.9")) if d["kind"] == "Deployment"
    ]
    assert container["image"] == deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["image"].endswith(":9.9.9")
    # The image's python3 (its venv, with pamqp), the chart's script verbatim.
    assert container["command"][:2] == ["python3", "-c"]
    assert container["command"][2].strip() == HOOK_SCRIPT.read_text().strip()
    env = _env(container)
    assert env["AMQP_HOST"] == "s4r-starlight-rabbitmq"  # the AMQP Service's name
    assert env["AMQP_PORT"] == "5672"
    assert env["AMQP_VHOST"] == "/"
    # The chart authenticates and mints no login: no guest/guest that the gateway would refuse,
    # the handshake check instead (helmTest.withoutLogin).
    assert env["AMQP_LOGIN"] == "handshake"
    assert "AMQP_USERNAME" not in env and "AMQP_PASSWORD" not in env


def test_the_hook_reads_its_login_from_a_secret_and_can_be_turned_off(helm: Helm) -> None:
    (pod,) = _hook_pods(
        helm.template(
            "--set",
            "helmTest.existingSecret=amqp-login,helmTest.username=monitor",
            "--set",
            "service.port=5673",
        )
    )
    env = _env(pod["spec"]["containers"][0])
    # Optional: a Secret without the key fails the check naming it (the pod still starts).
    assert env["AMQP_PASSWORD"] == {
        "secretKeyRef": {"name": "amqp-login", "key": "password", "optional": True}
    }
    assert (env["AMQP_USERNAME"], env["AMQP_PORT"], env["AMQP_LOGIN"]) == (
        "monitor",
        "5673",
        "session",
    )
    assert "helmTest.existingSecret" in env["AMQP_LOGIN_SOURCE"]
    (pod,) = _hook_pods(
        helm.template("--set", "helmTest.existingSecret=amqp-login,helmTest.usernameKey=user")
    )
    env = _env(pod["spec"]["containers"][0])
    assert env["AMQP_USERNAME"] == {
        "secretKeyRef": {"name": "amqp-login", "key": "user", "optional": True}
    }
    assert _hook_pods(helm.template("--set", "helmTest.enabled=false")) == []
    # mode pulsarProxy: the proxies serve AMQP, and this chart runs no gateway of its own.
    assert _hook_pods(helm.template("--set", "mode=pulsarProxy,pulsar.releaseName=pulsar")) == []


def test_an_open_fleet_is_tested_with_any_login_and_a_strict_one_fails_without(
    helm: Helm,
) -> None:
    (pod,) = _hook_pods(
        helm.template(
            "--set", "config.authenticationEnabled=false,config.amqpAllowUnauthenticatedRemote=true"
        )
    )
    env = _env(pod["spec"]["containers"][0])
    assert (env["AMQP_LOGIN"], env["AMQP_USERNAME"], env["AMQP_PASSWORD"]) == (
        "session",
        "guest",
        "guest",
    )
    (pod,) = _hook_pods(helm.template("--set", "helmTest.withoutLogin=fail"))
    assert _env(pod["spec"]["containers"][0])["AMQP_LOGIN"] == "fail"
    result = helm.run("template", "s4r", CHART_DIR, "--set", "helmTest.withoutLogin=skip",
                      check=False)  # fmt: skip
    assert result.returncode != 0 and "withoutLogin" in result.stderr, result.stderr


def test_an_hpa_on_cpu_without_a_cpu_request_is_refused_naming_it(helm: Helm) -> None:
    # helm install and upgrade render the same way; helm lint only reports a `fail` (INFO).
    result = helm.run(
        "template", "s4r", CHART_DIR, "--set", "autoscaling.enabled=true", check=False
    )
    assert result.returncode != 0, result.stdout
    assert "resources.requests.cpu" in result.stdout + result.stderr
    accepted = helm.template(
        "--set", "autoscaling.enabled=true", "--set", "resources.requests.cpu=250m"
    )
    assert any(doc["kind"] == "HorizontalPodAutoscaler" for doc in documents(accepted))


def _run_hook(pod: Manifest, **overrides: str) -> subprocess.CompletedProcess[str]:
    (container,) = pod["spec"]["containers"]
    env = {k: v for k, v in _env(container).items() if isinstance(v, str)}
    env.update(overrides)
    env["PATH"] = "/usr/bin:/bin"
    # The command as rendered, with this environment's Python in the image's python3's place
    # (same pamqp major version: pyproject.toml pins it for both).
    return subprocess.run(
        [sys.executable, *container["command"][1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and closes them without a word (not AMQP)."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(5)
    server.close()


def test_the_hook_script_fails_against_something_that_is_not_amqp(
    helm: Helm, silent_port: int
) -> None:
    (pod,) = _hook_pods(helm.template())
    result = _run_hook(pod, AMQP_HOST="127.0.0.1", AMQP_PORT=str(silent_port), AMQP_TIMEOUT="5")
    assert result.returncode != 0
    assert "FAIL" in result.stderr, result.stderr


@pytest.fixture
def gateway_with_jwt_logins(pulsar_stack: Any, tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A gateway on the local stack that authenticates as the chart's does (JWT as the
    password); yields its port and a valid token."""
    key = tmp_path / "secret.key"
    key.write_bytes(b"helm-test-secret-key-of-32-bytes!")
    token = jwt.encode({"sub": "helm-test"}, key.read_bytes(), algorithm="HS256")
    with fresh_namespace(pulsar_stack) as namespace:
        port = free_port()
        config = write_stack_config(
            tmp_path,
            pulsar_stack,
            port=port,
            namespace=namespace,
            extra=f"authenticationEnabled=true\ntokenSecretKey=file://{key}\n",
        )
        gateway = GatewayProcess("gateway", config, port).start()
        try:
            gateway.wait_ready()
            yield port, token
        finally:
            gateway.close()


@pytest.mark.integration
def test_the_hook_script_against_a_real_authenticating_gateway(
    helm: Helm, gateway_with_jwt_logins: tuple[int, str]
) -> None:
    """Each login the chart can give the hook, run against a gateway that authenticates."""
    port, token = gateway_with_jwt_logins
    here = {"AMQP_HOST": "127.0.0.1", "AMQP_PORT": str(port)}
    # Defaults: no login. The handshake check passes and says what it did not test.
    (pod,) = _hook_pods(helm.template())
    result = _run_hook(pod, **here)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK (handshake only)" in result.stdout and "403" in result.stdout, result.stdout
    assert "NOT TESTED" in result.stdout and "helmTest.existingSecret" in result.stdout
    # withoutLogin=fail: the same check, then a failure naming the value to set.
    (pod,) = _hook_pods(helm.template("--set", "helmTest.withoutLogin=fail"))
    result = _run_hook(pod, **here)
    assert result.returncode != 0
    assert "no login to test with" in result.stderr, result.stderr
    assert "helmTest.existingSecret" in result.stderr
    # A Secret with a token (the kubelet sets AMQP_PASSWORD from it): the whole session.
    (pod,) = _hook_pods(helm.template("--set", "helmTest.existingSecret=amqp-login"))
    result = _run_hook(pod, **here, AMQP_PASSWORD=token)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "published and got a message back" in result.stdout, result.stdout
    # A wrong token: the refusal, naming where the password came from.
    result = _run_hook(pod, **here, AMQP_PASSWORD=token[:-4] + "AAAA")
    assert result.returncode != 0
    assert "403" in result.stderr and 'helmTest.existingSecret "amqp-login"' in result.stderr
    # A Secret without the key (optional reference: the variable is unset): named, no hang.
    result = _run_hook(pod, **here)
    assert result.returncode != 0
    assert 'key "password" (helmTest.passwordKey) is missing' in result.stderr, result.stderr


@pytest.mark.integration
def test_the_hook_script_passes_against_an_open_gateway(
    helm: Helm, pulsar_stack: Any, tmp_path: Path
) -> None:
    with fresh_namespace(pulsar_stack) as namespace:
        port = free_port()
        config = write_stack_config(
            tmp_path,
            pulsar_stack,
            port=port,
            namespace=namespace,
        )
        gateway = GatewayProcess("gateway", config, port).start()
        try:
            gateway.wait_ready()
            (pod,) = _hook_pods(
                helm.template(
                    "--set",
                    "config.authenticationEnabled=false,config.amqpAllowUnauthenticatedRemote=true",
                )
            )
            result = _run_hook(pod, AMQP_HOST="127.0.0.1", AMQP_PORT=str(port))
            assert result.returncode == 0, result.stdout + result.stderr
            assert "published and got a message back" in result.stdout, result.stdout
            # The handshake check against a gateway that lets anyone in: it must say so.
            (pod,) = _hook_pods(helm.template())
            result = _run_hook(pod, AMQP_HOST="127.0.0.1", AMQP_PORT=str(port))
            assert result.returncode != 0
            assert "let an invalid login in" in result.stderr, result.stderr
        finally:
            gateway.close()
