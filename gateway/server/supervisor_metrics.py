"""The ``metricsListener`` of a ``--workers N`` supervisor: one endpoint for the N workers.

/metrics is the sum of the workers' own expositions (``observability/fleet.py``), read from
their loopback ports at scrape time; /readyz is 200 only while every worker is up and ready
and no stop was asked for. Prometheus, the kubelet and HAProxy see one replica.
"""

from __future__ import annotations

import httpx
import trio

from gateway.observability.fleet import SummedExposition
from gateway.observability.metrics import Identity, exposition, identity_families
from gateway.server.workers import Supervisor

__all__ = ["SupervisorMetrics"]

WORKER_TIMEOUT = 5.0


class SupervisorMetrics:
    def __init__(self, supervisor: Supervisor, identity: Identity) -> None:
        self._supervisor = supervisor
        self._identity = identity

    async def _fetch(self, path: str) -> list[tuple[int, int, str]]:
        """(worker index, HTTP status or 0 when not answering, body) of each worker."""
        ports = self._supervisor.metrics_ports
        answers: list[tuple[int, int, str]] = []
        async with httpx.AsyncClient(timeout=WORKER_TIMEOUT) as client:

            async def one(index: int, port: int) -> None:
                if not port:
                    answers.append((index, 0, "not started"))
                    return
                try:
                    response = await client.get(f"http://127.0.0.1:{port}{path}")
                except httpx.HTTPError as error:
                    answers.append((index, 0, type(error).__name__))
                    return
                answers.append((index, response.status_code, response.text))

            async with trio.open_nursery() as nursery:
                for index, port in enumerate(ports):
                    nursery.start_soon(one, index, port)
        return sorted(answers)

    async def metrics(self) -> bytes:
        texts = [body for _, status, body in await self._fetch("/metrics") if status == 200]
        return exposition(SummedExposition(texts, identity_families(self._identity)))

    async def readiness(self) -> tuple[bool, str]:
        if self._supervisor.stopping:
            return False, "not ready: draining\n"
        failing = [
            f"worker {index}: {body.strip() or status}"
            for index, status, body in await self._fetch("/readyz")
            if status != 200
        ]
        if failing:
            return False, "not ready: " + "; ".join(failing) + "\n"
        return True, "ready\n"
