"""What a gateway process runs beside its AMQP listeners to be observable: the
``metricsListener`` endpoint (/metrics, /healthz, /readyz), the Pulsar reachability probe
behind /readyz, and the usage-event publisher (docs/observability.md)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import trio

from gateway.config import GatewayConfig
from gateway.metadata.zookeeper import ZooKeeperMetadataStore
from gateway.model.vhost import Namespace, VhostMapper
from gateway.observability.counters import COUNTERS
from gateway.observability.health import Health
from gateway.observability.http import Endpoints, MetricsServer
from gateway.observability.metrics import GatewayCollector, Identity, exposition
from gateway.observability.usage import UsageWindows
from gateway.server.runtime import GatewayRuntime
from gateway.server.server import StartupError
from gateway.server.usage_publisher import UsagePublisher

log = logging.getLogger("gateway.monitoring")

__all__ = ["Monitoring", "replica_id"]

# How often Pulsar's admin API is asked whether it answers (a /readyz check reads the result).
PULSAR_PROBE_INTERVAL = 5.0


def replica_id(node: str, started_ms: int) -> str:
    """The usage events' replica id: the node, made unique per process start."""
    return f"{node}.{started_ms}"


@dataclass
class _Flags:
    listening: bool = False
    metadata_loaded: bool = False
    pulsar_reachable: bool = True  # until a probe says otherwise (start-up just checked it)


class Monitoring:
    """``node``: this process's rabbitmq_node (the supervisor's node plus ``-w<i>`` for a
    worker of ``--workers``). ``listen``: (host, port) of the HTTP listener, None for none."""

    def __init__(
        self,
        config: GatewayConfig,
        runtime: GatewayRuntime,
        *,
        node: str,
        listen: tuple[str, int] | None,
    ) -> None:
        self._config = config
        self._runtime = runtime
        self._listen = listen
        self._flags = _Flags()
        self.health = Health()
        self.health.add("listening", lambda: self._flags.listening)
        store = runtime.store
        zookeeper = store if isinstance(store, ZooKeeperMetadataStore) else None
        if zookeeper is not None:
            self.health.add("zookeeper", lambda: zookeeper.connected)
        self.health.add("pulsar", lambda: self._flags.pulsar_reachable)
        self.health.add("metadata", lambda: self._flags.metadata_loaded)
        self._mapper = VhostMapper.from_keys(config)
        # Every vhost label is the vhost's one name, on every replica (counters.py).
        COUNTERS.vhost_label = self._mapper.canonical
        COUNTERS.namespace_label = self._vhost_of_namespace
        self.collector = GatewayCollector(
            Identity(node=node, cluster=config.amqpClusterName),
            checks=self.health.results,
            zookeeper_connected=(lambda: zookeeper.connected) if zookeeper is not None else None,
            pulsar_clients=runtime.client.open_counts,
            held=runtime.backend.held_by_queue,
        )
        self.server: MetricsServer | None = None
        started_ms = int(time.time() * 1000)
        self.windows = UsageWindows(
            COUNTERS, replica_id(node, started_ms), self._namespace_of, started_ms
        )

    def _namespace_of(self, vhost: str) -> str:
        return str(self._mapper.namespace_for(vhost))

    def _vhost_of_namespace(self, namespace: str) -> str:
        try:
            return self._mapper.vhost_name(Namespace.parse(namespace))
        except ValueError:
            return namespace

    # ------------------------------------------------------------------ state changes

    def listening(self) -> None:
        self._flags.listening = True

    def metadata_loaded(self) -> None:
        self._flags.metadata_loaded = True

    def draining(self) -> None:
        self.health.draining = True

    # ------------------------------------------------------------------ tasks

    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """The endpoint, the probe and the usage events until cancelled; ``task_status`` gets
        the HTTP port (0 without a listener)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._probe_pulsar)
            if self._config.usageEventsEnabled:
                publisher = UsagePublisher(
                    self.windows,
                    self._runtime.client,
                    self._runtime.admin,
                    self._config.usageEventsTopic,
                    float(self._config.usageEventsIntervalSeconds),
                )
                nursery.start_soon(publisher.run)
            port = 0
            if self._listen is not None:
                host, wanted = self._listen
                self.server = MetricsServer(
                    host, wanted, Endpoints(metrics=self.metrics, readiness=self.readiness)
                )
                try:
                    port = await nursery.start(self.server.serve)
                except OSError as error:
                    raise StartupError(
                        f"cannot listen on metricsListener {self._config.metricsListener}: "
                        f"{error.strerror or error}"
                    ) from None
            task_status.started(port)

    async def metrics(self) -> bytes:
        return exposition(self.collector)

    async def readiness(self) -> tuple[bool, str]:
        return self.health.readiness()

    async def _probe_pulsar(self) -> None:
        admin = self._runtime.admin
        while True:
            await trio.sleep(PULSAR_PROBE_INTERVAL)
            try:
                with trio.fail_after(PULSAR_PROBE_INTERVAL):
                    await admin.request("GET", "/admin/v2/clusters")
            except Exception as error:
                if self._flags.pulsar_reachable:
                    log.warning("Pulsar's admin API does not answer: %s", error)
                self._flags.pulsar_reachable = False
            else:
                if not self._flags.pulsar_reachable:
                    log.info("Pulsar's admin API answers again")
                self._flags.pulsar_reachable = True


def worker_node(node: str, index: int | None) -> str:
    """rabbitmq_node of a process: a worker of ``--workers`` is ``<node>-w<index>``."""
    return node if index is None else f"{node}-w{index}"
