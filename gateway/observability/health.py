"""Readiness of one replica: what /readyz answers and starlight_ready exports.

Kubernetes (readiness probe) and HAProxy (health check) stop sending new clients to a replica
whose /readyz is not 200. It is 200 only when every check passes: the AMQP listeners accept
connections, the ZooKeeper session is connected, Pulsar answers, and the metadata of every vhost
is loaded; and never while the replica drains (SIGTERM): it is about to close its clients with
Connection.Close 320, new ones must go elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Health"]


class Health:
    def __init__(self) -> None:
        self._checks: dict[str, Callable[[], bool]] = {}
        self.draining = False

    def add(self, name: str, check: Callable[[], bool]) -> None:
        """``check`` is called at each probe: keep it cheap (read a flag, not the network)."""
        self._checks[name] = check

    def results(self) -> dict[str, bool]:
        results = {name: _safe(check) for name, check in self._checks.items()}
        results["not_draining"] = not self.draining
        return results

    def readiness(self) -> tuple[bool, str]:
        """(ready, a one-line body naming what is not ready)."""
        failing = [name for name, ok in self.results().items() if not ok]
        if not failing:
            return True, "ready\n"
        return False, "not ready: " + ", ".join(failing) + "\n"


def _safe(check: Callable[[], bool]) -> bool:
    try:
        return bool(check())
    except Exception:
        return False  # a check that cannot tell is not a pass
