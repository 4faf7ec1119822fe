"""A real Kubernetes API server (kube-apiserver + etcd, built by scripts/k8s_tools.sh) on free
loopback ports, for `helm install` and friends. Nothing runs pods: no scheduler, no kubelet,
no controllers, so objects are stored and served exactly as the API validates them, but a
Deployment never gets pods (hence no `helm --wait`)."""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.starlight_rabbitmq_chart.tools import require, tools_dir

START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class ApiServer:
    url: str
    token: str
    kubeconfig: Path

    def get(self, path: str) -> dict[str, Any] | None:
        """GET an API path; None for 404."""
        request = urllib.request.Request(
            self.url + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        # The API server's serving certificate is self-signed for this run.
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                body: dict[str, Any] = json.load(response)
                return body
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise


class _Process:
    def __init__(self, name: str, command: list[str], log: Path) -> None:
        self.name = name
        self.log = log
        self._file = log.open("wb")
        self.popen = subprocess.Popen(command, stdout=self._file, stderr=subprocess.STDOUT)

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{self.name} exited {self.popen.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._file.close()


def _wait_ready(server: ApiServer, processes: list[_Process]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    last: object = None
    while time.monotonic() < deadline:
        for process in processes:
            process.check_alive()
        try:
            # The namespaces of a fresh cluster exist once its bootstrap controllers have run.
            if server.get("/api/v1/namespaces/default") is not None:
                return
        except (OSError, urllib.error.URLError) as error:
            last = error
        time.sleep(0.2)  # polling interval of a condition with a deadline, not a sync
    raise AssertionError(f"kube-apiserver not ready after {START_TIMEOUT}s: {last}")


@contextmanager
def running_api_server(workdir: Path) -> Iterator[ApiServer]:
    tools = tools_dir() / "bin"
    etcd_binary = require(tools / "etcd")
    apiserver_binary = require(tools / "kube-apiserver")
    workdir.mkdir(parents=True, exist_ok=True)
    etcd_client, etcd_peer, secure_port = free_port(), free_port(), free_port()

    # The service-account signing key the API server insists on, and one token user.
    key = workdir / "sa.key"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    token = secrets.token_hex(16)
    (workdir / "tokens.csv").write_text(f'{token},admin,admin,"system:masters"\n')
    url = f"https://127.0.0.1:{secure_port}"
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "test", "cluster": {"server": url, "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
                "current-context": "test",
            }
        )
    )
    kubeconfig.chmod(0o600)
    server = ApiServer(url=url, token=token, kubeconfig=kubeconfig)

    with ExitStack() as stack:
        etcd = _Process(
            "etcd",
            [
                str(etcd_binary),
                "--name=test",
                f"--data-dir={workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_client}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=test=http://127.0.0.1:{etcd_peer}",
            ],
            workdir / "etcd.log",
        )
        stack.callback(etcd.stop)
        apiserver = _Process(
            "kube-apiserver",
            [
                str(apiserver_binary),
                f"--etcd-servers=http://127.0.0.1:{etcd_client}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={secure_port}",
                f"--cert-dir={workdir / 'certs'}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/16",
                # One API server on loopback: nothing to reconcile the kubernetes Service with.
                "--endpoint-reconciler-type=none",
            ],
            workdir / "kube-apiserver.log",
        )
        stack.callback(apiserver.stop)
        _wait_ready(server, [etcd, apiserver])
        yield server
