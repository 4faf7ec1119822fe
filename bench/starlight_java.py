"""Starlight for RabbitMQ's Java implementation (DataStax's ``starlight-for-rabbitmq``), built
from source and run standalone on the local stack's Pulsar, for ``bench_perftest.py
--starlight-java``.

    with starlight_java_target(stack) as (amqp_url, pids):   # pids: starlight-java, pulsar
        ...                                                   # PerfTest against amqp_url

Build (once; cached in ``~/.cache/starlight-bench/starlight-java-v4.0.0.4/``): the tag's source
is taken from the cache's ``src/`` if there, else ``git archive v4.0.0.4`` of the git repository
named by ``$STARLIGHT_JAVA_SOURCE`` (a clone of datastax/starlight-for-rabbitmq, bare or not;
nothing is downloaded from anywhere but Maven Central). Then ``mvn -DskipTests -pl
starlight-rabbitmq package`` makes its standalone jar (``...-jar-with-dependencies.jar``, which
bundles the Pulsar client and broker libraries it compiles against). Two departures from the
tag, both forced by what Maven Central serves, neither touching Starlight's own code:

* ``-Dpulsar.version`` is the local stack's Pulsar (scripts/stack.py, 4.0.8) instead of the
  tag's 4.0.4: Central lacks pulsar-proxy, managed-ledger, pulsar-broker-common and others at
  4.0.4. Starlight is then built and run against the same Pulsar it is measured on.
* jetcd-core-shaded and pulsar-opentelemetry are pinned to 4.0.7 in the root pom's
  dependencyManagement, as scripts/pulsar/pom.xml does for the stack: Central has no 4.0.8 of
  either.

The pom's DataStax repository is mirrored to an empty local directory (a settings file in the
cache), so Maven never waits on it.

Run: ``java -jar`` with the configuration Starlight's README gives (broker, web service,
ZooKeeper) and otherwise its defaults (batching on, Pulsar's log4j2 configuration at INFO),
except what keeps it apart from everything else on the machine: its AMQP listener and web
server on free loopback ports, vhost ``/`` mapped to a fresh ``public/bench-<random>`` namespace
(``amqpDefaultNamespace``), and its ZooKeeper metadata under a chroot of its own
(``/bench-starlight-java-<random>``; its curator namespace ``/starlight-rabbitmq`` is also the
gateway's prefix). All three go afterwards. It also writes ``public/default/__exchange-keys``
(a name fixed in its code), which is left in place.

Its netty event loops busy-wait (``EventLoopUtil.newEventLoopGroup(n, true, ...)`` in
GatewayService, not configurable): one acceptor and one I/O thread per core spin at 100% CPU
whether or not there is traffic, so on a small shared machine they take the cores Pulsar and the
client need, and its CPU per message counts the spinning. ``$STARLIGHT_JAVA_OPTS`` adds JVM
options; ``STARLIGHT_JAVA_OPTS=-Dio.netty.transport.noNative=true`` makes netty's epoll
transport unavailable, so Pulsar's EventLoopUtil falls back to NIO loops that block (a variant
to report beside the default, not instead of it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import bench_gateway_vs_pulsar as gvp  # noqa: E402
import maven  # noqa: E402
from server_process import free_port, port_open, start_logged, stop, wait_ready  # noqa: E402

TAG = "v4.0.0.4"
VERSION = TAG.removeprefix("v")
MODULE = "starlight-rabbitmq"
MAIN_JAR = f"{MODULE}-{VERSION}-jar-with-dependencies.jar"
SOURCE_ENV = "STARLIGHT_JAVA_SOURCE"
OPTS_ENV = "STARLIGHT_JAVA_OPTS"
CACHE = maven.CACHE_DIR / f"starlight-java-{TAG}"
# Pulsar modules Central has no 4.0.8 of; the versions scripts/pulsar/pom.xml pins for the stack.
CENTRAL_PINS = {"jetcd-core-shaded": "4.0.7", "pulsar-opentelemetry": "4.0.7"}
PIN_MARKER = (
    "<!-- pinned by bench/starlight_java.py: not on Maven Central at the build's version -->"
)
BUILD_TIMEOUT = 1800.0
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0


class StarlightJavaUnavailable(RuntimeError):
    """The Java gateway could not be built or started; the message says why and what next."""


# --- build ------------------------------------------------------------------------------------


def jar_path(pulsar_version: str) -> Path:
    """Where the built jar is kept: one per Pulsar version it was built against."""
    return CACHE / f"{MODULE}-{VERSION}-pulsar-{pulsar_version}.jar"


def source_tree() -> Path:
    """The tag's source in the cache, extracted from ``$STARLIGHT_JAVA_SOURCE`` the first time."""
    tree = CACHE / "src"
    if (tree / "pom.xml").exists():
        return tree
    repository = os.environ.get(SOURCE_ENV)
    if not repository:
        raise StarlightJavaUnavailable(
            f"no source of Starlight for RabbitMQ (Java) {TAG} in {tree}: set {SOURCE_ENV} to a "
            "git clone of datastax/starlight-for-rabbitmq (bare or not) that has the tag"
        )
    partial = CACHE / "src.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", repository, "archive", "--format=tar", TAG],
        capture_output=True,
        timeout=300,
        check=False,
    )
    if archive.returncode != 0:
        raise StarlightJavaUnavailable(
            f"git archive {TAG} in {repository}: {archive.stderr.decode(errors='replace')}"
        )
    subprocess.run(["tar", "-x", "-C", str(partial)], input=archive.stdout, check=True)
    os.replace(partial, tree)
    return tree


def pin_for_central(pom: Path) -> None:
    """Pin ``CENTRAL_PINS`` in the root pom's dependencyManagement (first entries: direct ones
    beat those of the imported Pulsar bom); done once, recognised by its marker."""
    text = pom.read_text()
    if PIN_MARKER in text:
        return
    anchor = "  <dependencyManagement>\n    <dependencies>\n"
    if text.count(anchor) != 1:
        raise StarlightJavaUnavailable(f"{pom}: no single dependencyManagement to pin in")
    pins = "".join(
        f"      <dependency>\n        <groupId>org.apache.pulsar</groupId>\n"
        f"        <artifactId>{artifact}</artifactId>\n        <version>{version}</version>\n"
        "      </dependency>\n"
        for artifact, version in CENTRAL_PINS.items()
    )
    pom.write_text(text.replace(anchor, f"{anchor}      {PIN_MARKER}\n{pins}"))


def maven_settings() -> Path:
    """A settings file that mirrors the pom's DataStax repository to an empty directory."""
    empty = CACHE / "no-repository"
    empty.mkdir(parents=True, exist_ok=True)
    settings = CACHE / "settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>no-datastax-repository</id>"
        "<mirrorOf>datastax-public-releases-local</mirrorOf>"
        f"<url>{empty.as_uri()}</url></mirror></mirrors></settings>\n"
    )
    return settings


def build(pulsar_version: str) -> Path:
    """The standalone jar built against ``pulsar_version`` (Maven the first time, ~5 min)."""
    jar = jar_path(pulsar_version)
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StarlightJavaUnavailable("`mvn` is not on PATH: Maven builds Starlight-Java")
    tree = source_tree()
    pin_for_central(tree / "pom.xml")
    log = CACHE / f"build-pulsar-{pulsar_version}.log"
    print(f"building Starlight for RabbitMQ (Java) {TAG} with Maven (log: {log}) ...", flush=True)
    command = [
        mvn,
        "--batch-mode",
        "--no-transfer-progress",
        "-s",
        str(maven_settings()),
        "-DskipTests",
        f"-Dpulsar.version={pulsar_version}",
        "-pl",
        MODULE,
        "package",
    ]
    with log.open("wb") as out:
        result = subprocess.run(
            command,
            cwd=tree,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=BUILD_TIMEOUT,
            check=False,
        )
    built = tree / MODULE / "target" / MAIN_JAR
    if result.returncode != 0 or not built.exists():
        errors = [line for line in log.read_text(errors="replace").splitlines() if "ERROR" in line]
        raise StarlightJavaUnavailable(
            f"Maven failed ({result.returncode}): " + "\n".join(errors[:5] or [f"see {log}"])
        )
    os.replace(built, jar)
    shutil.rmtree(tree / MODULE / "target", ignore_errors=True)  # ~500 MB of archives
    return jar


# --- run --------------------------------------------------------------------------------------


@contextlib.contextmanager
def zookeeper_chroot(zookeeper: str) -> Iterator[str]:
    """A fresh ZooKeeper node for the Java gateway's metadata (created: ZooKeeper needs a
    chroot to exist); ``host:port/chroot`` for its configuration; removed on exit."""
    from kazoo.client import KazooClient

    chroot = f"/bench-starlight-java-{uuid.uuid4().hex[:10]}"
    zk = KazooClient(hosts=zookeeper, timeout=10)
    zk.start(timeout=10)
    try:
        zk.create(chroot)
        try:
            yield f"{zookeeper}{chroot}"
        finally:
            zk.delete(chroot, recursive=True)
    finally:
        zk.stop()
        zk.close()


@contextlib.contextmanager
def starlight_java_process(
    jar: Path, broker_url: str, web_url: str, zookeeper: str, namespace: str, jvm_flags: list[str]
) -> Iterator[tuple[int, int]]:
    """The standalone Java gateway serving vhost ``/`` on ``public/<namespace>``: (AMQP port,
    pid) once it listens; stopped on exit."""
    amqp_port, web_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-starlight-java-") as directory:
        conf, log = Path(directory) / "starlight-rabbitmq.conf", Path(directory) / "java.log"
        conf.write_text(
            f"brokerServiceURL={broker_url}\n"
            f"brokerWebServiceURL={web_url}\n"
            f"configurationStoreServers={zookeeper}\n"
            f"amqpListeners=amqp://127.0.0.1:{amqp_port}\n"
            f"amqpDefaultNamespace={namespace}\n"
            # Its web server (/metrics) defaults to 0.0.0.0:8080, the stack's Pulsar's port.
            "bindAddress=127.0.0.1\n"
            f"webServicePort={web_port}\n"
        )
        java = shutil.which("java")
        if java is None:
            raise StarlightJavaUnavailable("`java` is not on PATH")
        proc = start_logged(
            [java, *jvm_flags, "-jar", str(jar), "-c", str(conf)], log, cwd=directory
        )
        try:
            wait_ready(
                proc,
                lambda: port_open(amqp_port),
                log=log,
                what="Starlight for RabbitMQ (Java)",
                timeout=START_TIMEOUT,
                error=StarlightJavaUnavailable,
            )
            yield amqp_port, proc.pid
        finally:
            # SIGTERM: its shutdown hook closes producers and listeners.
            stop(proc, signal.SIGTERM, STOP_TIMEOUT)


@contextlib.contextmanager
def starlight_java_target(stack: ModuleType) -> Iterator[tuple[str, dict[str, int]]]:
    """The Java gateway on the local stack's Pulsar (built first if need be), for PerfTest:
    (AMQP URL, pids of it and of Pulsar's JVM); afterwards, Pulsar entries per message in its
    namespace (its producers batch by default)."""
    jar = build(stack.PULSAR_VERSION)
    with (
        gvp.measured_broker(stack, batch_index_acks=False) as broker,
        gvp.fresh_namespace(broker.web_url, broker.zookeeper) as namespace,
        zookeeper_chroot(broker.zookeeper) as zookeeper,
        starlight_java_process(
            jar,
            broker.broker_url,
            broker.web_url,
            zookeeper,
            namespace,
            [*stack.JVM_FLAGS, *os.environ.get(OPTS_ENV, "").split()],
        ) as (port, pid),
    ):
        pids = {"starlight-java": pid}
        if broker.pid:
            pids["pulsar"] = broker.pid
        extra = os.environ.get(OPTS_ENV)
        print(
            f"Starlight-Java {VERSION} on 127.0.0.1:{port}, namespace public/{namespace}"
            + (f", {OPTS_ENV}={extra}" if extra else "")
        )
        yield f"amqp://guest:guest@127.0.0.1:{port}", pids
        gvp.print_entries_per_message("Starlight-Java", broker.web_url, namespace)


def main() -> int:
    """Build (if need be) and print the jar's path."""
    stack = gvp.load_stack()
    try:
        print(build(stack.PULSAR_VERSION))
    except StarlightJavaUnavailable as exc:
        print(f"cannot build Starlight-Java: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
