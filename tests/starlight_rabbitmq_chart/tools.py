"""The Kubernetes tools the chart tests run: found in scripts/k8s_tools.sh's cache, never on PATH.

A missing tool fails the test (it is never skipped) with the command that builds it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_DIR = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_DIR / "helm" / "starlight-rabbitmq"
EXAMPLES_DIR = REPO_DIR / "helm" / "examples"
TOOLS_SCRIPT = REPO_DIR / "scripts" / "k8s_tools.sh"

#: How long one helm command may take (an install against a fresh API server included).
HELM_TIMEOUT = 120.0


def tools_dir() -> Path:
    output = subprocess.run(
        [str(TOOLS_SCRIPT), "--print-dir"], check=True, capture_output=True, text=True
    )
    return Path(output.stdout.strip())


def require(path: Path) -> Path:
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{path} is missing: run `make k8s-tools` (scripts/k8s_tools.sh builds helm, "
            "helm-unittest, etcd and kube-apiserver into its cache)",
            pytrace=False,
        )
    return path


@dataclass(frozen=True)
class Helm:
    """helm with the unittest plugin, isolated from the user's own helm configuration."""

    binary: Path
    plugins: Path
    home: Path

    def run(
        self, *args: str | Path, check: bool = True, kubeconfig: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        command: list[str] = [str(self.binary), *map(str, args)]
        if kubeconfig is not None:
            command += ["--kubeconfig", str(kubeconfig)]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "HELM_PLUGINS": str(self.plugins),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        result = subprocess.run(
            command, capture_output=True, text=True, env=env, timeout=HELM_TIMEOUT
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(command[1:])} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def template(self, *args: str | Path) -> str:
        return self.run("template", "s4r", CHART_DIR, *args).stdout


def make_helm(home: Path) -> Helm:
    tools = tools_dir()
    plugins = tools / "helm-plugins"
    require(plugins / "unittest" / "untt")
    return Helm(binary=require(tools / "bin" / "helm"), plugins=plugins, home=home)


def example_files() -> Sequence[Path]:
    """Values files for this chart (the Pulsar chart's values file is checked apart)."""
    return sorted(
        path
        for path in EXAMPLES_DIR.glob("*.yaml")
        if not path.name.endswith(".pulsar-values.yaml")
    )
