"""The chart rendered offline: helm lint, helm template (defaults and every example), the
helm-unittest suites, values.schema.json's refusals, and the Kubernetes OpenAPI schemas of the
oldest and newest Kubernetes the chart supports (kubernetes-validate --strict)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest

from gateway.config import config_from_text, describe_keys
from tests.starlight_rabbitmq_chart.rendering import (
    EVERYTHING_ON,
    Manifest,
    by_kind,
    documents,
    gateway_conf,
)
from tests.starlight_rabbitmq_chart.tools import (
    CHART_DIR,
    EXAMPLES_DIR,
    REPO_DIR,
    Helm,
    example_files,
)

#: Chart.yaml's kubeVersion floor and the newest schemas kubernetes-validate ships.
OLDEST_KUBERNETES = "1.25.0"
NEWEST_KUBERNETES = "1.37.0"


def test_chart_sources_are_current() -> None:
    """values.schema.json's key list, templates/_keys.tpl and the dashboard copies."""
    result = subprocess.run(
        [sys.executable, str(REPO_DIR / "scripts" / "helm_chart.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_lists_every_gateway_key() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    config_keys = set(schema["properties"]["config"]["properties"])
    missing = {spec.name for spec in describe_keys()} - config_keys
    assert not missing, f"keys of gateway/config/ the chart cannot set: {sorted(missing)}"


def test_lint(helm: Helm) -> None:
    result = helm.run("lint", "--strict", CHART_DIR)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("example", example_files(), ids=lambda path: path.name)
def test_lint_with_example(helm: Helm, example: Path) -> None:
    helm.run("lint", "--strict", CHART_DIR, "-f", example)


def test_helm_unittest_suites(helm: Helm) -> None:
    result = helm.run("unittest", CHART_DIR, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.search(r"Tests:\s+(\d+) passed, (\d+) total", result.stdout)
    assert passed is not None, result.stdout
    assert passed[1] == passed[2] and int(passed[1]) >= 30, result.stdout


def test_defaults_render_the_fleet_with_a_disruption_budget(helm: Helm) -> None:
    kinds = by_kind(helm.template())
    assert sorted(kinds) == [
        "ConfigMap",
        "Deployment",
        "Pod",  # the `helm test` hook (test_chart_hooks.py)
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
    ]
    services = {doc["metadata"]["name"]: doc for doc in kinds["Service"]}
    # No management API by default (docs/management.md: managementListener is off).
    assert sorted(services) == ["s4r-starlight-rabbitmq", "s4r-starlight-rabbitmq-metrics"]
    assert "managementListener" not in gateway_conf(helm.template())
    assert services["s4r-starlight-rabbitmq"]["spec"]["type"] == "LoadBalancer"
    assert services["s4r-starlight-rabbitmq-metrics"]["spec"]["clusterIP"] == "None"
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    "example", [None, *example_files()], ids=lambda p: p.name if p else "defaults"
)
def test_rendered_gateway_conf_is_accepted_by_the_gateway(helm: Helm, example: Path | None) -> None:
    # The defaults authenticate AMQP clients (docs/helm.md, "Authentication"): the gateway then
    # needs the JWT key, which a real release gives under `jwt`.
    key = ["--set", "jwt.existingSecret=jwt,jwt.secretKeyKey=secret.key"]
    rendered = helm.template(*(["-f", str(example)] if example else key))
    if not any(doc["kind"] == "Deployment" for doc in documents(rendered)):
        return  # mode pulsarProxy: no gateway pods, no gateway.conf (checked below)
    conf = gateway_conf(rendered)
    # The gateway's own loader, with the per-pod environment the Deployment sets.
    environ = {
        "STARLIGHT_advertisedAddress": "10.0.0.7",
        "STARLIGHT_amqpNodeName": "s4r-starlight-rabbitmq-7d9f-x2x5q",
    }
    (deployment,) = [doc for doc in documents(rendered) if doc["kind"] == "Deployment"]
    if deployment["spec"]["template"]["spec"]["containers"][0].get("envFrom"):
        # What the example's secret holds (its comment says how to create it).
        environ["STARLIGHT_brokerClientAuthenticationParameters"] = "token:eyJhbGciOi"
    config = config_from_text(conf, environ, source="gateway.conf")
    assert config.amqpListeners[0].url == "amqp://0.0.0.0:5672"
    assert config.authenticationEnabled
    assert config.advertisedAddress == "10.0.0.7"
    assert config.amqpNodeName == "s4r-starlight-rabbitmq-7d9f-x2x5q"
    assert config.amqpClusterName == "s4r-starlight-rabbitmq"
    assert config.metricsListener is not None


@pytest.mark.parametrize(
    ("arguments", "url"),
    [
        (["management.enabled=true"], "http://0.0.0.0:15672"),
        (
            ["management.enabled=true,management.tls=true,management.port=15671",
             "tls.enabled=true,tls.existingSecret=amqp-tls"],
            "https://0.0.0.0:15671",
        ),
    ],
    ids=["http", "https"],
)  # fmt: skip
def test_management_api_is_served_where_its_service_points(
    helm: Helm, arguments: list[str], url: str
) -> None:
    """management.enabled: the gateway's own loader reads the rendered managementListener,
    and the Service, the container port and the NetworkPolicy all name that port."""
    values = ["jwt.existingSecret=jwt,jwt.secretKeyKey=secret.key", "networkPolicy.enabled=true"]
    sets = [item for value in [*values, *arguments] for item in ("--set", value)]
    rendered = helm.template(*sets)
    environ = {"STARLIGHT_advertisedAddress": "10.0.0.7", "STARLIGHT_amqpNodeName": "s4r-0"}
    config = config_from_text(gateway_conf(rendered), environ, source="gateway.conf")
    assert config.managementListener is not None
    assert config.managementListener.url == url
    port = config.managementListener.port
    kinds = by_kind(rendered)
    services = {doc["metadata"]["name"]: doc for doc in kinds["Service"]}
    service = services["s4r-starlight-rabbitmq-management"]
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "management", "port": port, "targetPort": "management", "protocol": "TCP"}
    ]
    (deployment,) = kinds["Deployment"]
    container_ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert {"name": "management", "containerPort": port, "protocol": "TCP"} in container_ports
    (policy,) = kinds["NetworkPolicy"]
    allowed = [entry["port"] for rule in policy["spec"]["ingress"] for entry in rule["ports"]]
    assert "management" in allowed


def test_pulsar_proxy_mode_puts_a_management_service_before_the_proxies(helm: Helm) -> None:
    rendered = helm.template(
        "-f", EXAMPLES_DIR / "alongside-pulsar-proxy.yaml", "--set", "management.enabled=true"
    )
    kinds = by_kind(rendered)
    assert "Deployment" not in kinds
    services = {doc["metadata"]["name"]: doc for doc in kinds["Service"]}
    management = services["s4r-starlight-rabbitmq-management"]
    assert management["spec"]["selector"] == services["s4r-starlight-rabbitmq"]["spec"]["selector"]
    assert management["spec"]["ports"][0]["targetPort"] == 15672
    assert not _validate(documents(rendered), NEWEST_KUBERNETES)


def test_pulsar_proxy_mode_renders_only_the_load_balancer(helm: Helm) -> None:
    rendered = helm.template("-f", EXAMPLES_DIR / "alongside-pulsar-proxy.yaml")
    kinds = by_kind(rendered)
    assert set(kinds) <= {"Service", "ConfigMap"}
    (service,) = kinds["Service"]
    assert service["spec"]["selector"] == {
        "app": "pulsar",
        "release": "pulsar",
        "component": "proxy",
    }
    assert all("gateway.conf" not in doc.get("data", {}) for doc in kinds.get("ConfigMap", []))


def test_everything_on_renders_each_optional_object(helm: Helm) -> None:
    kinds = by_kind(helm.template(*EVERYTHING_ON))
    for kind in ("HorizontalPodAutoscaler", "ServiceMonitor", "NetworkPolicy", "Secret"):
        assert kind in kinds, f"no {kind} rendered"
    (hpa,) = kinds["HorizontalPodAutoscaler"]
    assert [metric["type"] for metric in hpa["spec"]["metrics"]] == ["Resource", "Pods"]


def test_dashboards_become_configmaps_for_grafanas_sidecar(helm: Helm, tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART_DIR, chart)
    dashboard = {"title": "Gateway overview", "panels": []}
    (chart / "dashboards" / "overview.json").write_text(json.dumps(dashboard))
    rendered = helm.run("template", "s4r", chart, "--set", "dashboards.enabled=true").stdout
    (config_map,) = [
        doc for doc in documents(rendered) if doc["metadata"]["name"].endswith("dashboard-overview")
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(config_map["data"]["overview.json"]) == dashboard
    shipped = sorted((CHART_DIR / "dashboards").glob("*.json"))
    with_real_files = helm.template("--set", "dashboards.enabled=true")
    dashboards = [d for d in documents(with_real_files) if "-dashboard-" in d["metadata"]["name"]]
    assert len(dashboards) == len(shipped)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--set", "config.amqpHeartbeatDelay=often"], "amqpHeartbeatDelay"),
        (["--set", "config.amqpHeartbeatDelai=60"], "amqpHeartbeatDelai"),
        (["--set", "config.amqpSessionCountLimit=70000"], "amqpSessionCountLimit"),
        (["--set", "config.gatewayMemoryAllocator=tcmalloc"], "gatewayMemoryAllocator"),
        (["--set", "mode=sidecar"], "mode"),
        (["--set", "service.port=0"], "port"),
        (["--set", "replicaCunt=3"], "replicaCunt"),
        (["--set", "proxyProtocol.trustedNetworks={everyone}"], "trustedNetworks"),
        (["--set", "management.enable=true"], "enable"),
        (["--set", "management.port=70000"], "port"),
        (["--set", "management.service.type=ExternalName"], "type"),
        (["--set", "networkPolicy.managementFrom=everyone"], "managementFrom"),
    ],
)
def test_schema_rejects_a_bad_value_naming_it(helm: Helm, arguments: list[str], named: str) -> None:
    result = helm.run("template", "s4r", CHART_DIR, *arguments, check=False)
    assert result.returncode != 0, f"{arguments} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def _validate(manifests: list[Manifest], version: str) -> list[str]:
    problems = []
    for manifest in manifests:
        where = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            # Custom resources have no OpenAPI schema in Kubernetes itself.
            if not manifest["apiVersion"].startswith("monitoring.coreos.com/"):
                problems.append(f"{where}: no schema for {manifest['apiVersion']}")
        except kubernetes_validate.ValidationError as error:
            problems.append(f"{where}: {error.message} at {list(error.path)}")
    return problems


@pytest.mark.parametrize("version", [OLDEST_KUBERNETES, NEWEST_KUBERNETES])
@pytest.mark.parametrize(
    "values",
    ["defaults", "everything-on", *(path.name for path in example_files())],
)
def test_manifests_match_kubernetes_openapi_strictly(helm: Helm, version: str, values: str) -> None:
    if values == "defaults":
        arguments: tuple[str, ...] = ()
    elif values == "everything-on":
        arguments = EVERYTHING_ON
    else:
        arguments = ("-f", str(EXAMPLES_DIR / values))
    rendered = helm.template("--kube-version", version, *arguments)
    problems = _validate(documents(rendered), version)
    assert not problems, "\n".join(problems)


NAME = "s4r-starlight-rabbitmq"

ROLLUP_ON = (
    "--set",
    "rollup.enabled=true,rollup.image.repository=registry.example.com/s4r-rollup",
    "--set-string",
    "rollup.config.rollupWindowSeconds=60\\,300",
    "--set",
    "rollup.config.rollupTriggerSeconds=5",
    "--set",
    "rollup.postgres.existingSecret=rollup-db,rollup.master=spark://spark:7077",
    "--set-string",
    "rollup.sparkConf.spark\\.sql\\.shuffle\\.partitions=4",
    "--set",
    "jwt.existingSecret=jwt,jwt.secretKeyKey=secret.key,brokerTls.existingSecret=broker-ca",
    "--set",
    "secrets.values.brokerClientAuthenticationParameters=token:eyJhbGciOi",
    "--set",
    "config.brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
    "--set",
    "config.usageEventsTopic=persistent://ops/usage/events",
)


def _rollup_objects(rendered: str) -> dict[str, Manifest]:
    return {
        doc["kind"]: doc
        for doc in documents(rendered)
        if doc["metadata"]["name"] == "s4r-starlight-rabbitmq-rollup"
    }


def test_rollup_job_reads_the_gateways_pulsar_and_checkpoints_on_its_volume(helm: Helm) -> None:
    """The rendered rollup.conf through the job's own settings loader, and the pod that runs it
    with the volume its checkpoint path is on."""
    from gateway.rollup.cli import parse_args
    from gateway.rollup.settings import settings_from_config

    rendered = helm.template(*ROLLUP_ON)
    objects = _rollup_objects(rendered)
    assert sorted(objects) == ["ConfigMap", "Deployment", "PersistentVolumeClaim"]
    environ = {"STARLIGHT_brokerClientAuthenticationParameters": "token:eyJhbGciOi"}
    gateway = config_from_text(gateway_conf(rendered), environ, source="gateway.conf")
    rollup_conf = objects["ConfigMap"]["data"]["rollup.conf"]
    settings = settings_from_config(config_from_text(rollup_conf, environ, source="rollup.conf"))
    # The same Pulsar, login and topic as the gateways that publish the events.
    assert settings.source_options["serviceUrl"] == gateway.brokerServiceURL
    assert settings.source_options["token"] == "eyJhbGciOi"
    assert settings.topic == gateway.usageEventsTopic == "persistent://ops/usage/events"
    assert settings.window_seconds == (60, 300) and settings.trigger_seconds == 5
    assert "amqpListeners" not in rollup_conf and "metricsListener" not in rollup_conf

    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}  # never two drivers at once
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/s4r-rollup:0.1.0"
    assert container["command"] == ["starlight-rabbitmq"]
    assert container["args"] == [
        "rollup", "--config", "/etc/starlight-rabbitmq/rollup.conf",
        "--master", "spark://spark:7077",
        "--conf", "spark.sql.shuffle.partitions=4",
        "--log-level", "INFO",
    ]  # fmt: skip
    # The job's own option parser accepts them (args[0] is the subcommand).
    options = parse_args(container["args"][1:])
    assert (options.master, options.conf) == (
        "spark://spark:7077",
        ["spark.sql.shuffle.partitions=4"],
    )
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert mounts["config"]["mountPath"] == "/etc/starlight-rabbitmq/rollup.conf"
    assert volumes["config"]["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    # Checkpoint and Parquet output on the claimed volume, not the read-only root filesystem.
    data_dir = mounts["data"]["mountPath"]
    assert settings.checkpoint_location == f"{data_dir}/checkpoint"
    assert settings.parquet_path == f"{data_dir}/parquet"
    claim = objects["PersistentVolumeClaim"]
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    # The broker CA at the path rollup.conf names; the database URL from its own Secret only.
    assert settings.source_options["serviceUrl"].startswith("pulsar://")
    assert f"brokerClientTrustCertsFilePath={mounts['broker-ca']['mountPath']}/ca.crt" in (
        rollup_conf.splitlines()
    )
    env = {item["name"]: item for item in container["env"]}
    assert env["STARLIGHT_rollupPostgresUrl"]["valueFrom"]["secretKeyRef"] == {
        "name": "rollup-db",
        "key": "url",
    }
    deployments = by_kind(rendered)["Deployment"]
    (gateway_deployment,) = [d for d in deployments if d["metadata"]["name"] == NAME]
    gateway_env = gateway_deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert "STARLIGHT_rollupPostgresUrl" not in {item["name"] for item in gateway_env}


def test_no_gateway_selector_picks_up_the_rollup_pod(helm: Helm) -> None:
    """The AMQP Service must not send clients to the rollup pod, nor the gateways' Deployment,
    PDB or NetworkPolicy count it as theirs."""
    rendered = helm.template(*ROLLUP_ON, "--set", "networkPolicy.enabled=true")
    pod_labels = _rollup_objects(rendered)["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selectors = []
    for doc in documents(rendered):
        if doc["metadata"]["name"] == "s4r-starlight-rabbitmq-rollup":
            continue
        spec = doc.get("spec", {})
        if doc["kind"] == "Service":
            selectors.append(spec["selector"])
        elif doc["kind"] in ("Deployment", "PodDisruptionBudget"):
            selectors.append(spec["selector"]["matchLabels"])
        elif doc["kind"] == "NetworkPolicy":
            selectors.append(spec["podSelector"]["matchLabels"])
    assert len(selectors) >= 5
    for selector in selectors:
        assert not selector.items() <= pod_labels.items(), selector


def test_rollup_on_an_existing_claim_and_parquet_off(helm: Helm) -> None:
    rendered = helm.template(
        *ROLLUP_ON,
        "--set",
        "rollup.persistence.existingClaim=shared-rollup",
        "--set-string",
        "rollup.config.rollupParquetPath=,rollup.config.rollupCheckpointLocation=s3a://b/ckpt",
    )
    objects = _rollup_objects(rendered)
    assert "PersistentVolumeClaim" not in objects
    volumes = objects["Deployment"]["spec"]["template"]["spec"]["volumes"]
    (data,) = [volume for volume in volumes if volume["name"] == "data"]
    assert data["persistentVolumeClaim"]["claimName"] == "shared-rollup"
    lines = objects["ConfigMap"]["data"]["rollup.conf"].splitlines()
    assert "rollupParquetPath=" in lines
    assert "rollupCheckpointLocation=s3a://b/ckpt" in lines


def test_rollup_is_off_by_default(helm: Helm) -> None:
    assert _rollup_objects(helm.template()) == {}


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--set", "rollup.enabled=true"], "rollup.image.repository"),
        (["--set-string", "config.rollupWindowSeconds=60"], "rollup.config"),
        (
            ["--set", "rollup.enabled=true,rollup.image.repository=r",
             "--set-string", "rollup.config.rollupParquetPath="],
            "rollupPostgresUrl",
        ),
    ],
    ids=["no-image", "rollup-key-under-config", "no-output"],
)  # fmt: skip
def test_rollup_values_the_job_cannot_run_with_are_refused_naming_them(
    helm: Helm, arguments: list[str], named: str
) -> None:
    result = helm.run("template", "s4r", CHART_DIR, *arguments, check=False)
    assert result.returncode != 0, f"{arguments} was accepted"
    assert named in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        (["--set", "rollup.config.rollupWindowSecond=60"], "rollupWindowSecond"),
        (["--set", "rollup.config.rollupTriggerSeconds=often"], "rollupTriggerSeconds"),
        (["--set", "rollup.config.rollupWatermarkSeconds=-1"], "rollupWatermarkSeconds"),
        (["--set", "rollup.logLevel=TRACE"], "logLevel"),
        (["--set", "rollup.persistence.size=lots"], "size"),
        (["--set", "rollup.sparkConf.spark\\.ui\\.port=4040"], "spark.ui.port"),
        (["--set", "rollup.image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "helmTest.withoutLogin=skip"], "withoutLogin"),
    ],
)
def test_schema_rejects_a_bad_rollup_or_helm_test_value_naming_it(
    helm: Helm, arguments: list[str], named: str
) -> None:
    result = helm.run("template", "s4r", CHART_DIR, *arguments, check=False)
    assert result.returncode != 0, f"{arguments} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def test_rollup_config_offers_every_rollup_key_but_the_secret_one() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    offered = set(schema["properties"]["rollup"]["properties"]["config"]["properties"])
    rollup_keys = {spec.name for spec in describe_keys() if spec.name.startswith("rollup")}
    assert offered == rollup_keys - {"rollupPostgresUrl"}
