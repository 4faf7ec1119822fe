"""`helm install`, `upgrade`, `rollback` and `uninstall` of the chart against a real Kubernetes
API server (kube-apiserver + etcd started here on loopback; no pods ever run)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.starlight_rabbitmq_chart.kube_apiserver import ApiServer, running_api_server
from tests.starlight_rabbitmq_chart.rendering import EVERYTHING_ON_VALUES
from tests.starlight_rabbitmq_chart.tools import CHART_DIR, EXAMPLES_DIR, Helm

NAME = "s4r-starlight-rabbitmq"


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_api_server(tmp_path_factory.mktemp("kube")) as server:
        yield server


def _deployment(server: ApiServer, namespace: str) -> dict[str, Any] | None:
    return server.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}")


def _checksum(deployment: dict[str, Any] | None) -> str:
    assert deployment is not None
    annotations: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
    return annotations["checksum/config"]


def _gateway_conf(server: ApiServer, namespace: str) -> str:
    config_map = server.get(f"/api/v1/namespaces/{namespace}/configmaps/{NAME}")
    assert config_map is not None
    text: str = config_map["data"]["gateway.conf"]
    return text


def test_install_upgrade_rollback_uninstall(helm: Helm, api_server: ApiServer) -> None:
    ns = "lifecycle"
    kube = api_server.kubeconfig

    installed = helm.run(
        "install", "s4r", CHART_DIR, "-n", ns, "--create-namespace", kubeconfig=kube
    )
    assert "STATUS: deployed" in installed.stdout
    assert "Connect an AMQP 0-9-1 client" in installed.stdout  # NOTES.txt
    first = _deployment(api_server, ns)
    assert first is not None and first["spec"]["replicas"] == 2
    service = api_server.get(f"/api/v1/namespaces/{ns}/services/{NAME}")
    assert service is not None and service["spec"]["type"] == "LoadBalancer"
    assert [port["port"] for port in service["spec"]["ports"]] == [5672]
    pdb = api_server.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{NAME}")
    assert pdb is not None and pdb["spec"]["maxUnavailable"] == 1

    # Scaling: the pod template (and so its config checksum) is untouched, nothing restarts.
    helm.run("upgrade", "s4r", CHART_DIR, "-n", ns, "--reuse-values",
             "--set", "replicaCount=3", kubeconfig=kube)  # fmt: skip
    scaled = _deployment(api_server, ns)
    assert scaled is not None and scaled["spec"]["replicas"] == 3
    assert _checksum(scaled) == _checksum(first)

    # A configuration change: a new gateway.conf and a new pod-template checksum, which is
    # what makes the Deployment controller roll the pods (the gateway reads it at start).
    helm.run("upgrade", "s4r", CHART_DIR, "-n", ns, "--reuse-values",
             "--set", "config.amqpHeartbeatDelay=30", kubeconfig=kube)  # fmt: skip
    reconfigured = _deployment(api_server, ns)
    assert "amqpHeartbeatDelay=30" in _gateway_conf(api_server, ns).splitlines()
    assert _checksum(reconfigured) != _checksum(first)
    assert reconfigured is not None and reconfigured["spec"]["replicas"] == 3

    helm.run("rollback", "s4r", "1", "-n", ns, kubeconfig=kube)
    rolled_back = _deployment(api_server, ns)
    assert rolled_back is not None and rolled_back["spec"]["replicas"] == 2
    assert _checksum(rolled_back) == _checksum(first)
    assert "amqpHeartbeatDelay=30" not in _gateway_conf(api_server, ns).splitlines()
    history = helm.run("history", "s4r", "-n", ns, kubeconfig=kube).stdout
    assert "Rollback to 1" in history

    helm.run("uninstall", "s4r", "-n", ns, kubeconfig=kube)
    assert _deployment(api_server, ns) is None
    assert api_server.get(f"/api/v1/namespaces/{ns}/services/{NAME}") is None
    assert api_server.get(f"/api/v1/namespaces/{ns}/configmaps/{NAME}") is None
    assert api_server.get(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{NAME}") is None


@pytest.mark.parametrize(
    ("namespace", "arguments"),
    [
        ("everything-on", list(EVERYTHING_ON_VALUES)),
        ("standalone-fleet", ["-f", str(EXAMPLES_DIR / "standalone-fleet.yaml")]),
        ("alongside-proxy", ["-f", str(EXAMPLES_DIR / "alongside-pulsar-proxy.yaml")]),
    ],
)
def test_the_api_server_accepts_every_object(
    helm: Helm, api_server: ApiServer, namespace: str, arguments: list[str]
) -> None:
    """Server-side validation of what the examples and every option render. The API server
    has no ServiceMonitor CRD and no custom metrics API, so those stay out, as in a cluster
    without them."""
    kube = api_server.kubeconfig
    helm.run("install", "s4r", CHART_DIR, "-n", namespace, "--create-namespace", *arguments,
             kubeconfig=kube)  # fmt: skip
    service = api_server.get(f"/api/v1/namespaces/{namespace}/services/{NAME}")
    assert service is not None
    if namespace == "everything-on":  # management.enabled, on a load balancer of its own
        management = api_server.get(f"/api/v1/namespaces/{namespace}/services/{NAME}-management")
        assert management is not None and management["spec"]["type"] == "LoadBalancer"
        assert [port["port"] for port in management["spec"]["ports"]] == [15672]
        # rollup.enabled: its Deployment and the claim its checkpoint lives on.
        rollup_path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{NAME}-rollup"
        rollup = api_server.get(rollup_path)
        assert rollup is not None and rollup["spec"]["strategy"]["type"] == "Recreate"
        claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{NAME}-rollup"
        claim = api_server.get(claim_path)
        assert claim is not None and claim["spec"]["storageClassName"] == "fast"
    helm.run("uninstall", "s4r", "-n", namespace, kubeconfig=kube)
    if namespace == "everything-on":
        # helm.sh/resource-policy: keep: the checkpoint outlives the release, and the next
        # install of the release takes the same claim over (the job resumes from it).
        kept = api_server.get(claim_path)
        assert kept is not None
        assert api_server.get(rollup_path) is None
        helm.run("install", "s4r", CHART_DIR, "-n", namespace, *arguments, kubeconfig=kube)
        again = api_server.get(claim_path)
        assert again is not None and again["metadata"]["uid"] == kept["metadata"]["uid"]
        helm.run("uninstall", "s4r", "-n", namespace, kubeconfig=kube)


def test_install_refuses_a_bad_value_naming_it(
    helm: Helm, api_server: ApiServer, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("config:\n  amqpHeartbeatDelay: often\n")
    result = helm.run("install", "s4r", CHART_DIR, "-n", "refused", "--create-namespace",
                      "-f", values, check=False, kubeconfig=api_server.kubeconfig)  # fmt: skip
    assert result.returncode != 0
    assert "amqpHeartbeatDelay" in result.stderr and "integer" in result.stderr, result.stderr
    assert _deployment(api_server, "refused") is None
    releases = helm.run("list", "-n", "refused", "-q", kubeconfig=api_server.kubeconfig)
    assert releases.stdout.strip() == ""
