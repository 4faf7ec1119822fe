"""Reading a gateway's /metrics in tests: samples by name and labels."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway_process import GatewayProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_port(process: GatewayProcess, role: str = "", timeout: float = 60.0) -> int:
    """The port the process (``role``: ``supervisor``, ``worker-0``, ...) logged serving on."""
    prefix = rf"{role}\[\d+\] " if role else ""
    match = process.wait_for(
        rf"{prefix}gateway\.metrics: metrics and health on http://[^:]+:(\d+)", timeout=timeout
    )[0]
    return int(match.group(1))


def scrape(port: int) -> tuple[str, Samples]:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    response.raise_for_status()
    text = response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` whose labels include ``labels`` (summed if several match)."""
    wanted = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and wanted <= set(ls)]
    assert found, f"no sample {name}{labels}"
    return sum(found)


def wait_metrics(port: int, check: Callable[[Samples], bool], timeout: float = 30.0) -> Samples:
    """Scrape until ``check`` holds (the gateway counts some things after the client saw
    its answer, e.g. a connection's close)."""
    deadline = time.monotonic() + timeout
    while True:
        _, samples = scrape(port)
        if check(samples):
            return samples
        if time.monotonic() > deadline:
            return samples  # the caller's asserts say what differs
        time.sleep(0.1)


def readyz(port: int) -> tuple[int, str]:
    response = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
    return response.status_code, response.text


def counters(samples: Samples, names: Mapping[str, str]) -> dict[str, float]:
    return {short: value(samples, full) for short, full in names.items()}
