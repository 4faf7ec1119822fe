"""helm/examples/alongside-pulsar-proxy.pulsar-values.yaml: the values for the Apache Pulsar
chart (apache/pulsar-helm-chart 4.x) that run the proxy extension on the chart's stock proxy
image, with our gateway as a native sidecar container (docs/proxy-extension.md, "Child or
sidecar").

Every container is checked against the image it names: a container of our image runs a program
that image has (its entry point, or the base image's ``cp``), with arguments the gateway accepts;
a container of the stock Pulsar image never runs ``starlight-rabbitmq`` (it has no Python).

The Apache Pulsar chart itself is published on GitHub and on pulsar.apache.org's Helm
repository, neither of which this project's machines reach (only PyPI, Maven Central, the Go
module proxy, npm and Debian, and the Go proxy refuses that repository). So the render against
the real chart runs where a copy of it is at ``$STARLIGHT_PULSAR_CHART`` or in the tools cache
(``<scripts/k8s_tools.sh --print-dir>/pulsar-helm-chart/charts/pulsar``, e.g. from ``helm pull
apache/pulsar --version 4.7.0 --untar`` or ``git archive pulsar-4.7.0 charts/pulsar`` of a clone)
and is skipped elsewhere, saying so; the checks of the values file itself always run.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import gateway
from gateway.cli import parse_args
from gateway.config import config_from_text
from tests.starlight_rabbitmq_chart.tools import EXAMPLES_DIR, REPO_DIR, Helm, tools_dir

VALUES = EXAMPLES_DIR / "alongside-pulsar-proxy.pulsar-values.yaml"
CONTAINERFILE = REPO_DIR / "helm" / "image" / "Containerfile"
SHIM_SETTINGS = (
    REPO_DIR / "extension_shim/src/main/java/io/starlight/rabbitmq/proxy/ShimSettings.java"
)
OUR_IMAGE = re.compile(r"(^|/)starlight-rabbitmq(:|@|$)")
PULSAR_IMAGE = re.compile(r"(^|/)apachepulsar/pulsar(-all)?(:|@|$)")
#: The Pulsar image's user (its Dockerfile's USER), which the proxy runs as.
PULSAR_UID = 10000


def values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(VALUES.read_text())
    return loaded


def shim_keys() -> set[str]:
    """ShimSettings.KEYS: the extension's own keys, from its source."""
    source = SHIM_SETTINGS.read_text()
    constants = dict(re.findall(r'static final String (\w+) = "(\w+)";', source))
    listed = re.search(r"List<String> KEYS =\s*List\.of\(([^)]*)\)", source)
    assert listed is not None
    return {constants[name.strip()] for name in listed.group(1).split(",")}


def entry_point() -> list[str]:
    match = re.search(r"^ENTRYPOINT (\[.*\])$", CONTAINERFILE.read_text(), re.M)
    assert match is not None
    entry: list[str] = yaml.safe_load(match.group(1))
    return entry


def program_in_our_image(container: dict[str, Any]) -> None:
    """What the container runs exists in our image, and the gateway accepts its arguments."""
    containerfile = CONTAINERFILE.read_text()
    command = container.get("command") or entry_point()
    program, *rest = command
    if program == "cp":  # the base image's coreutils; the NAR where the Containerfile puts it
        source = rest[0]
        assert "COPY nar/ /opt/starlight-rabbitmq/nar/" in containerfile
        assert source == f"/opt/starlight-rabbitmq/nar/starlight-rabbitmq-{gateway.__version__}.nar"
        return
    # The entry point, on the image's PATH (its virtualenv's bin).
    assert program == "starlight-rabbitmq", command
    assert "PATH=/opt/starlight-rabbitmq/venv/bin:" in containerfile
    parse_args([*rest, *container.get("args", [])])  # exits (SystemExit) on an unknown option


def sidecar_config(container: dict[str, Any]) -> Any:
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    return config_from_text("", environ=env)


def check_pod(pod: dict[str, Any], proxy_conf: dict[str, str]) -> None:
    containers = [*(pod.get("initContainers") or []), *pod["containers"]]
    ours = [c for c in containers if OUR_IMAGE.search(c["image"])]
    stock = [c for c in containers if PULSAR_IMAGE.search(c["image"])]
    assert len(ours) + len(stock) == len(containers), [c["image"] for c in containers]
    for container in ours:
        program_in_our_image(container)
    for container in stock:
        text = " ".join([*container.get("command", []), *container.get("args", [])])
        assert "starlight-rabbitmq" not in text, f"{container['name']} runs the gateway: {text}"

    # The gateway: a native sidecar of our image, listening in the directory the proxy relays to.
    (sidecar,) = [c for c in ours if not c.get("command")]
    assert sidecar["restartPolicy"] == "Always"
    config = sidecar_config(sidecar)
    (listener,) = config.amqpListeners
    assert listener.scheme == "amqp+unix"
    assert config.amqpProxyProtocolTrustedNetworks is not None
    assert proxy_conf["amqpGatewayMode"] == "sidecar"
    work = proxy_conf["amqpGatewayWorkDirectory"]
    assert listener.path == f"{work}/amqp.sock"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}

    def volume_at(container: dict[str, Any], path: str) -> str:
        (name,) = [m["name"] for m in container["volumeMounts"] if m["mountPath"] == path]
        assert name in volumes, f"{container['name']} mounts {name}, which the pod lacks"
        return name

    proxy_containers = [c for c in stock if c in pod["containers"]]
    for proxy in proxy_containers:
        shared = volume_at(proxy, work)
        assert shared == volume_at(sidecar, work)
        assert "emptyDir" in volumes[shared]
        assert volume_at(proxy, proxy_conf["proxyExtensionsDirectory"]) in volumes
    # The socket is private to the gateway's user (0600): that user must be the proxy's.
    assert sidecar["securityContext"]["runAsUser"] == PULSAR_UID
    # Readiness and start-up on the gateway's own /readyz, on its metrics listener.
    port = config.metricsListener.port
    for probe in ("startupProbe", "readinessProbe"):
        assert sidecar[probe]["httpGet"] == {"path": "/readyz", "port": port}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    for container in containers:
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{container['name']}: {mount['name']}"
    # Token authentication: the gateway checks AMQP logins with the release's key, reaching
    # the brokers with the proxy's token, from the chart's own volumes.
    assert config.authenticationEnabled
    for key in (config.tokenPublicKey, config.brokerClientAuthenticationParameters):
        path = key.removeprefix("file://")
        assert any(path.startswith(m["mountPath"] + "/") for m in sidecar["volumeMounts"]), (
            f"{path} is on no volume of the gateway container"
        )


def proxy_conf_from_values() -> dict[str, str]:
    data = values()["proxy"]["configData"]
    return {key.removeprefix("PULSAR_PREFIX_"): str(value) for key, value in data.items()}


def test_the_values_name_only_keys_the_extension_or_the_proxy_knows() -> None:
    conf = proxy_conf_from_values()
    own = {key for key in conf if key.startswith(("amqpGateway", "amqpProxy"))}
    assert own <= shim_keys(), own - shim_keys()
    assert conf["proxyExtensions"] == "rabbitmq"
    assert conf["amqpListeners"].startswith("amqp://")
    assert "amqpGatewayCommand" not in conf  # nothing to run inside the stock image


def test_our_containers_run_what_our_image_has() -> None:
    # Without the chart: the containers the values add, on their own.
    proxy = values()["proxy"]
    for container in proxy["initContainers"]:
        assert OUR_IMAGE.search(container["image"])
        program_in_our_image(container)
    (sidecar,) = [c for c in proxy["initContainers"] if c.get("restartPolicy") == "Always"]
    assert sidecar_config(sidecar).amqpListeners[0].scheme == "amqp+unix"
    # The NAR lands in the volume the proxy reads its extensions from.
    (copy,) = [c for c in proxy["initContainers"] if c.get("command", [""])[0] == "cp"]
    (into,) = [
        m["name"] for m in copy["volumeMounts"] if m["mountPath"] == copy["command"][-1].rstrip("/")
    ]
    extensions = proxy_conf_from_values()["proxyExtensionsDirectory"]
    assert [m["name"] for m in proxy["extraVolumeMounts"] if m["mountPath"] == extensions] == [into]


def pulsar_chart() -> Path | None:
    configured = os.environ.get("STARLIGHT_PULSAR_CHART")
    candidates = [Path(configured)] if configured else []
    candidates.append(tools_dir() / "pulsar-helm-chart" / "charts" / "pulsar")
    return next((path for path in candidates if (path / "Chart.yaml").is_file()), None)


@pytest.fixture(scope="module")
def rendered(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Any]]:
    chart = pulsar_chart()
    if chart is None:
        pytest.skip(
            "the Apache Pulsar chart is not on this machine (GitHub and pulsar.apache.org are "
            "out of reach here): put charts/pulsar of apache/pulsar-helm-chart 4.x at "
            "$STARLIGHT_PULSAR_CHART or in the tools cache's pulsar-helm-chart/charts/pulsar"
        )
    # A copy without its one dependency (victoria-metrics-k8s-stack, off by default and not
    # vendored): helm template refuses a chart whose dependencies are missing, used or not.
    copy = tmp_path_factory.mktemp("pulsar-chart") / "pulsar"
    shutil.copytree(chart, copy)
    meta = yaml.safe_load((copy / "Chart.yaml").read_text())
    assert meta["version"].startswith("4."), meta["version"]
    meta.pop("dependencies", None)
    (copy / "Chart.yaml").write_text(yaml.safe_dump(meta))
    output = helm.run("template", "pulsar", copy, "-f", VALUES).stdout
    yield [doc for doc in yaml.safe_load_all(output) if doc]


def test_the_apache_chart_renders_the_proxy_pod_with_the_gateway_sidecar(
    rendered: list[Any],
) -> None:
    (proxy,) = [
        doc
        for doc in rendered
        if doc["kind"] == "StatefulSet" and doc["metadata"]["name"].endswith("-proxy")
    ]
    (configmap,) = [
        doc
        for doc in rendered
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == proxy["metadata"]["name"]
    ]
    conf = {
        key.removeprefix("PULSAR_PREFIX_"): str(value) for key, value in configmap["data"].items()
    }
    pod = proxy["spec"]["template"]["spec"]
    check_pod(pod, conf)
    # The chart's statusFilePath, which the extension holds while the gateway answers, and
    # which the proxy container's probes read through /status.html.
    assert conf["statusFilePath"]
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/status.html"
    assert conf["authenticationEnabled"] == "true"


def test_no_workload_of_the_release_runs_the_gateway_in_a_pulsar_image(
    rendered: list[Any],
) -> None:
    seen = 0
    for doc in rendered:
        pod = (doc.get("spec") or {}).get("template", {}).get("spec")
        if doc["kind"] in ("StatefulSet", "Deployment", "Job", "DaemonSet") and pod:
            for container in [*(pod.get("initContainers") or []), *pod["containers"]]:
                seen += 1
                if PULSAR_IMAGE.search(container["image"]):
                    text = " ".join([*container.get("command", []), *container.get("args", [])])
                    assert "starlight-rabbitmq" not in text, container["name"]
    assert seen > 5


@pytest.mark.parametrize("version", ["1.29.0", "1.37.0"])
def test_the_proxy_statefulset_matches_kubernetes_openapi_strictly(
    rendered: list[Any], version: str
) -> None:
    # 1.29: the first Kubernetes with native sidecars on by default (an init container's
    # restartPolicy: Always); older API servers drop the field and would run it to completion.
    (proxy,) = [
        doc
        for doc in rendered
        if doc["kind"] == "StatefulSet" and doc["metadata"]["name"].endswith("-proxy")
    ]
    kubernetes_validate.validate(proxy, version, strict=True)
