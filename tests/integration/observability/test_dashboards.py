"""Every query of every dashboard, evaluated by a real Prometheus scraping real gateways.

Debian's ``/usr/bin/prometheus`` is started on a free loopback port with a generated
configuration (scrape every second) and a temporary storage directory, two replicas serve a
steady pika load, and each dashboard query (variables substituted as Grafana would) is run
through Prometheus's HTTP API: every one must return data, and the headline panels the right
magnitude (the publish rate panel ≈ the rate the test sends).

RabbitMQ's own "RabbitMQ-Overview" dashboard is evaluated the same way when its JSON is given
(``RABBITMQ_OVERVIEW_JSON=path``; it is not part of this repository), to show that it works
unchanged on a fleet of gateways.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pika
import pika.exceptions
import pytest

from tests.integration.observability.scrape import metrics_port
from tests.support.fleet import Fleet
from tests.support.gateway_process import free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not Path("/usr/bin/prometheus").exists(), reason="Debian prometheus"),
]

REPO = Path(__file__).resolve().parents[3]
# The Prometheus dashboards (rollup-throughput.json charts the rollup's PostgreSQL table:
# tests/integration/rollup/test_dashboard.py runs its queries).
DASHBOARDS = sorted(
    path for path in (REPO / "dashboards").glob("*.json") if path.name != "rollup-throughput.json"
)
RATE_WINDOW = "10s"
# Per-second rates of the load below.
PUBLISH_RATE = {"replica-1": 40.0, "replica-2": 20.0}
UNROUTABLE_EVERY = 10  # every 10th publish of replica-1 is mandatory and unroutable
# Metadata churn, so that each replica sees the other's changes (the watch lag panel): every
# replica declares and deletes an exchange of its own this often.
CHURN_PERIOD = 0.5


class Prometheus:
    def __init__(self, directory: Path, targets: list[int]) -> None:
        self.port = free_port()
        config = directory / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: starlight\n    static_configs:\n"
            f"      - targets: [{', '.join(repr(f'127.0.0.1:{p}') for p in targets)}]\n"
        )
        self._log = (directory / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                "/usr/bin/prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "prometheus exited"
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("prometheus did not become ready")

    def query(self, expression: str) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=30)
        body = response.json()
        assert body.get("status") == "success", f"{expression}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


class Load:
    """Steady publishers (confirms) on both replicas, one consumer on the second, and
    exchanges declared and deleted on both (metadata changes for the other to see)."""

    def __init__(self, ports: dict[str, int]) -> None:
        self._ports = ports
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._publish, args=(name,), daemon=True) for name in ports
        ] + [threading.Thread(target=self._consume, daemon=True)]
        self._threads += [
            threading.Thread(target=self._churn, args=(name,), daemon=True) for name in ports
        ]
        self.errors: list[BaseException] = []

    def __enter__(self) -> Load:
        connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", self._ports["replica-1"])
        )
        connection.channel().queue_declare("dash")
        connection.close()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _guard(self, work: Any) -> None:
        try:
            work()
        except BaseException as error:
            self.errors.append(error)

    def _publish(self, name: str) -> None:
        def work() -> None:
            connection = pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", self._ports[name])
            )
            channel = connection.channel()
            channel.confirm_delivery()
            period = 1.0 / PUBLISH_RATE[name]
            sent = 0
            start = time.monotonic()
            while not self._stop.is_set():
                if name == "replica-1" and sent % UNROUTABLE_EVERY == UNROUTABLE_EVERY - 1:
                    with contextlib.suppress(pika.exceptions.UnroutableError):
                        channel.basic_publish("", "nowhere", b"u", mandatory=True)
                else:
                    channel.basic_publish("", "dash", b"d" * 200)
                sent += 1
                pause = start + sent * period - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            connection.close()

        self._guard(work)

    def _consume(self) -> None:
        def work() -> None:
            connection = pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", self._ports["replica-2"])
            )
            channel = connection.channel()
            channel.basic_qos(prefetch_count=100)
            for method, _props, _body in channel.consume("dash", inactivity_timeout=0.2):
                if self._stop.is_set():
                    break
                if method is not None:
                    channel.basic_ack(method.delivery_tag)
            channel.cancel()
            connection.close()

        self._guard(work)

    def _churn(self, name: str) -> None:
        def work() -> None:
            connection = pika.BlockingConnection(
                pika.ConnectionParameters("127.0.0.1", self._ports[name])
            )
            channel = connection.channel()
            round_ = 0
            while not self._stop.wait(CHURN_PERIOD):
                exchange = f"churn-{name}-{round_}"
                channel.exchange_declare(exchange, "fanout")
                channel.exchange_delete(exchange)
                round_ += 1
            connection.close()

        self._guard(work)


def substitute(expression: str, variables: dict[str, str]) -> str:
    # Longest names first: $__rate_interval before $__range, $rabbitmq_node before ...
    for name in sorted(variables, key=len, reverse=True):
        expression = expression.replace(f"${{{name}}}", variables[name])
        expression = expression.replace(f"${name}", variables[name])
    return expression


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, expression) of every query, rows and nested panels included."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
        for panel in panels:
            yield from walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    yield panel.get("title") or "(untitled)", target["expr"]

    return walk(dashboard.get("panels", []))


def numbers(result: list[dict[str, Any]]) -> list[float]:
    return [float(series["value"][1]) for series in result]


@pytest.fixture
def observed(tmp_path: Path, fleet: Fleet) -> Iterator[Prometheus]:
    replicas = [
        fleet.start(f"replica-{index}", extra=f"amqpNodeName=rabbit@replica-{index}\n")
        for index in (1, 2)
    ]
    for replica in replicas:
        replica.wait_ready()
    prometheus = Prometheus(tmp_path, [metrics_port(replica) for replica in replicas])
    try:
        prometheus.wait_ready()
        ports = {replica.name: replica.port for replica in replicas}
        with Load(ports) as load:
            # Until both targets are up, rates over the window are filled, and the queue
            # gauges have come from a refresh by the leader (every 15 s).
            deadline = time.monotonic() + 90
            while True:
                up = numbers(prometheus.query('up{job="starlight"}'))
                queues = numbers(prometheus.query("sum(rabbitmq_queues)"))
                ready = numbers(prometheus.query("sum(rabbitmq_queue_messages_ready)"))
                scraped = numbers(
                    prometheus.query(
                        'count_over_time(rabbitmq_identity_info{rabbitmq_node="rabbit@replica-1"}[20s])'
                    )
                )
                if up == [1.0, 1.0] and queues == [1.0] and ready and scraped and scraped[0] >= 15:
                    break
                assert not load.errors, load.errors
                assert time.monotonic() < deadline, f"up {up}, queues {queues}"
                time.sleep(0.5)
            yield prometheus
            assert not load.errors, load.errors
    finally:
        prometheus.close()
        # Stopped gracefully, so that their ZooKeeper sessions close with them (a killed
        # replica's ephemeral nodes outlive it until its session expires, and the namespace's
        # metadata is deleted right after this test).
        for replica in replicas:
            replica.signal(signal.SIGTERM)
        for replica in replicas:
            replica.wait_exit(60)


OUR_VARIABLES = {
    "rabbitmq_cluster": "starlight-rabbitmq",
    "rabbitmq_node": ".*",
    "vhost": ".*",
    "__rate_interval": RATE_WINDOW,
    "__range": "1m",
    "__interval": "1s",
}

TOTAL_PUBLISH = sum(PUBLISH_RATE.values())


def near(value: float, expected: float, factor: float = 1.6) -> bool:
    return expected / factor <= value <= expected * factor


def check_magnitude(title: str, query: str, result: list[dict[str, Any]]) -> None:
    values = numbers(result)
    total = sum(v for v in values if not math.isnan(v))
    if title == "Incoming messages / s":
        assert near(total, TOTAL_PUBLISH), values
    elif title == "Outgoing messages / s":
        routed = TOTAL_PUBLISH - PUBLISH_RATE["replica-1"] / UNROUTABLE_EVERY
        assert near(total, routed), values
    elif title == "Replicas":
        assert total == 2
    elif title == "Connections":
        assert total == 5  # two publishers, one consumer, two metadata churners
    elif title == "Consumers":
        assert total == 1
    elif title == "Publishers":
        assert total == 2
    elif title == "Queues":
        assert total == 1
    elif title == "Messages published / s per replica":
        by_node = {s["metric"]["rabbitmq_node"]: float(s["value"][1]) for s in result}
        assert near(by_node["rabbit@replica-1"], PUBLISH_RATE["replica-1"]), by_node
        assert near(by_node["rabbit@replica-2"], PUBLISH_RATE["replica-2"]), by_node
    elif title == "Unroutable messages / s":
        if "returned" in query:
            assert near(total, PUBLISH_RATE["replica-1"] / UNROUTABLE_EVERY, 2.0), values
        else:
            assert total == 0  # every unroutable publish of the load is mandatory
    elif title == "Replicas ready":
        assert total == 2
    elif title == "Leaders per namespace":
        assert values and all(v == 1 for v in values), values
    elif title == "Readiness checks failing":
        assert total == 0
    elif title in ("Publish → confirm latency", "Pulsar send latency", "Metadata watch lag"):
        assert all(0 < v < 5 for v in values), values


def test_every_dashboard_query_returns_data_of_the_right_magnitude(
    observed: Prometheus,
) -> None:
    assert [path.name for path in DASHBOARDS] == [
        "fleet-metadata.json",
        "gateway-overview.json",
        "pulsar-path.json",
    ]
    evaluated = 0
    lag_checked = False
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for variable in dashboard["templating"]["list"]:
            definition = variable.get("definition")
            if definition:  # label_values(series, label): the series must exist
                series = definition[len("label_values(") :].rsplit(",", 1)[0]
                assert observed.query(substitute(series, OUR_VARIABLES)), definition
        for title, expression in targets(dashboard):
            query = substitute(expression, OUR_VARIABLES)
            assert "$" not in query, query
            result = observed.query(query)
            assert result, f"{path.name}: {title}: no data for {query}"
            check_magnitude(title, query, result)
            lag_checked |= title == "Metadata watch lag"
            evaluated += 1
    assert evaluated >= 40
    assert lag_checked


def test_rabbitmqs_overview_dashboard_shows_every_panel(observed: Prometheus) -> None:
    source = os.environ.get("RABBITMQ_OVERVIEW_JSON")
    if not source:
        pytest.skip("RABBITMQ_OVERVIEW_JSON not set (RabbitMQ-Overview.json, rabbitmq-server)")
    dashboard = json.loads(Path(source).read_text())
    variables = {
        "rabbitmq_cluster": "starlight-rabbitmq",
        # A Kubernetes scrape adds the pod's namespace; here there is none: "" matches that.
        "namespace": "",
        "endpoint": "aggregated",
        "__rate_interval": RATE_WINDOW,
        "__range": "1m",
        "__interval": "1s",
    }
    empty = []
    evaluated = 0
    for title, expression in targets(dashboard):
        result = observed.query(substitute(expression, variables))
        evaluated += 1
        if not result:
            empty.append(title)
        elif title == "Incoming messages / s":
            assert near(sum(numbers(result)), TOTAL_PUBLISH), result
        elif title == "Nodes":
            assert numbers(result) == [2.0]
    assert evaluated > 30
    assert empty == [], f"panels without data: {empty}"
