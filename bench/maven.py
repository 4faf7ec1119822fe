"""A Java tool's classpath from a pom, resolved by Maven into ~/.m2 and cached per pom content.

The benchmarks' Java tools (RabbitMQ PerfTest, Pulsar's pulsar-perf) come from Maven Central
this way, as the local stack's Pulsar does (scripts/stack.py): each has a pom of packaging
``pom`` that names it, and ``mvn dependency:build-classpath`` lists its jars.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "starlight-bench"
MAVEN_TIMEOUT = 900.0


class MavenError(RuntimeError):
    pass


def classpath(pom: Path, name: str) -> str:
    """The runtime classpath of ``pom`` (downloads the first time); ``name`` names the cache."""
    key = hashlib.sha256(pom.read_bytes()).hexdigest()[:16]
    cached = CACHE_DIR / f"{name}-classpath-{key}.txt"
    if cached.exists():
        entries = cached.read_text().strip().split(os.pathsep)
        if entries and all(Path(e).exists() for e in entries):
            return os.pathsep.join(entries)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(f"`mvn` is not on PATH: Maven is needed to fetch {name}")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    result = subprocess.run(
        [
            mvn,
            "--batch-mode",
            "--no-transfer-progress",
            "-f",
            str(pom),
            "dependency:build-classpath",
            f"-Dmdep.outputFile={partial}",
            "-Dmdep.includeScope=runtime",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=MAVEN_TIMEOUT,
        check=False,
    )
    if result.returncode != 0 or not partial.exists():
        errors = [line for line in result.stdout.splitlines() if "[ERROR]" in line][:5]
        raise MavenError(f"Maven failed on {pom}: " + ("\n".join(errors) or result.stdout[-2000:]))
    os.replace(partial, cached)
    return cached.read_text().strip()
