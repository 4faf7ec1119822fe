"""Rendered manifests as Python objects, and the values that turn every optional object on."""

from __future__ import annotations

from typing import Any

import yaml

Manifest = dict[str, Any]

#: The ServiceMonitor CRD and the custom metrics API, declared present (helm template only).
OPTIONAL_APIS = (
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions",
    "custom.metrics.k8s.io/v1beta1",
)

#: Values that turn every optional object and branch of the templates on at once.
EVERYTHING_ON_VALUES = (
    "--set",
    "autoscaling.enabled=true,autoscaling.connections.enabled=true,resources.requests.cpu=500m",
    "--set",
    "metrics.serviceMonitor.enabled=true,dashboards.enabled=true,networkPolicy.enabled=true",
    "--set",
    "tls.enabled=true,tls.existingSecret=amqp-tls,tls.caKey=ca.crt",
    "--set",
    "jwt.existingSecret=jwt,jwt.publicKeyKey=public.key,brokerTls.existingSecret=broker-ca",
    "--set",
    "proxyProtocol.enabled=true,proxyProtocol.trustedNetworks={10.0.0.0/8}",
    "--set",
    "secrets.values.brokerClientAuthenticationParameters=token:x,secrets.existingSecret=more",
    "--set",
    "workers=2,service.externalTrafficPolicy=Local",
    "--set",
    "autoscaling.behavior.scaleDown.stabilizationWindowSeconds=600",
    "--set",
    "management.enabled=true,management.tls=true,management.service.type=LoadBalancer",
    "--set",
    "management.service.loadBalancerSourceRanges={203.0.113.0/24}",
    "--set",
    "networkPolicy.managementFrom[0].namespaceSelector.matchLabels.team=ops",
    "--set",
    "rollup.enabled=true,rollup.image.repository=registry.example.com/s4r-rollup",
    "--set",
    "rollup.postgres.existingSecret=rollup-db,rollup.persistence.storageClassName=fast",
    "--set",
    "rollup.resources.requests.cpu=1,rollup.master=spark://spark:7077",
    "--set",
    "helmTest.existingSecret=amqp-login",
)

EVERYTHING_ON = OPTIONAL_APIS + EVERYTHING_ON_VALUES


def documents(rendered: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def by_kind(rendered: str) -> dict[str, list[Manifest]]:
    kinds: dict[str, list[Manifest]] = {}
    for doc in documents(rendered):
        kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def gateway_conf(rendered: str) -> str:
    (config_map,) = [
        doc
        for doc in documents(rendered)
        if doc["kind"] == "ConfigMap" and "gateway.conf" in doc.get("data", {})
    ]
    text: str = config_map["data"]["gateway.conf"]
    return text
