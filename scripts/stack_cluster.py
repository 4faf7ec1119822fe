#!/usr/bin/env python3
"""The local stack's ``cluster`` profile: a multi-broker Apache Pulsar, one JVM per server.

    python3 scripts/stack.py up --profile cluster [--fresh]   # make stack-up PROFILE=cluster
    python3 scripts/stack.py status --profile cluster [--json]
    python3 scripts/stack.py down --profile cluster

One ZooKeeper, two bookies and two brokers, each a JVM of its own started from the same
Maven-resolved Pulsar classpath as the other profiles (no Docker, no tarball):

- ZooKeeper: ``org.apache.zookeeper.server.ZooKeeperServerMain`` (standalone mode);
- cluster metadata, once: ``org.apache.pulsar.PulsarClusterMetadataSetup`` (formats
  BookKeeper's ``/ledgers``, creates the cluster, tenants ``public`` and ``pulsar``,
  ``public/default``);
- bookies: ``org.apache.bookkeeper.server.Main``;
- brokers: ``org.apache.pulsar.PulsarBrokerStarter`` with the modular load manager, so bundle
  ownership moves between them (an unload, a broker's death).

Configs come from scripts/pulsar/cluster/ (one template per kind of server). Its state lives in
``$STACK_DIR/cluster`` (``$STACK_CLUSTER_DIR`` overrides): a pid file per JVM, one lock, logs per
JVM, data kept across down/up. ``up`` is idempotent and also repairs: a JVM whose process is
gone (killed) is started again on its data, the others are left alone. Tests make a cluster of
their own on free ports with ``new_cluster()`` and use ``ensure_up`` / ``stop_server`` /
``down`` on it.

Standard library only, like stack.py (whose helpers it uses).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stack

TEMPLATES = stack.PULSAR_DIR / "cluster"
CLUSTER_NAME = "cluster"

ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
METADATA_SETUP_MAIN = "org.apache.pulsar.PulsarClusterMetadataSetup"
BOOKIE_MAIN = "org.apache.bookkeeper.server.Main"
BROKER_MAIN = "org.apache.pulsar.PulsarBrokerStarter"

# Five JVMs share the machine's two cores with the tests: small heaps, the serial collector
# (few threads, short pauses on heaps this small), and the C1 compiler only, which halves a
# JVM's start (as the secured profile's) at the cost of peak throughput.
_COMMON_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError")
ZOOKEEPER_JVM = ("-Xms32m", "-Xmx128m", *_COMMON_JVM)
BOOKIE_JVM = ("-Xms64m", "-Xmx256m", "-XX:MaxDirectMemorySize=192m", *_COMMON_JVM)
BROKER_JVM = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:MaxDirectMemorySize=256m",
    # The load manager reads the container's CPU limit through this JDK-internal package
    # (Pulsar's own launcher opens it too); without it every load report logs a stack trace.
    "--add-opens",
    "java.base/jdk.internal.platform=ALL-UNNAMED",
    *_COMMON_JVM,
)

# Brokers' and bookies' ZooKeeper sessions (ms): a killed broker's bundles stay its own until
# its session expires, so this is most of the time its topics are unavailable after a crash.
# Short, but well above a pause of a small heap's serial collection.
SESSION_TIMEOUT_MS = 6000
METADATA_SETUP_TIMEOUT = 180.0


@dataclass(frozen=True)
class Server:
    """One JVM of the cluster."""

    name: str  # zookeeper, bookie-1, bookie-2, broker-1, broker-2
    kind: str  # zookeeper, bookie, broker
    port: int  # its client port: ZooKeeper's, the bookie's, the broker's binary protocol
    web_port: int | None = None  # a broker's web service (admin REST API)

    @property
    def broker_url(self) -> str:
        return f"pulsar://{stack.HOST}:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://{stack.HOST}:{self.web_port}"

    @property
    def ports(self) -> dict[int, str]:
        """What each of its ports is for, to name it when something else holds it."""
        if self.kind == "broker":
            return {
                self.port: f"Pulsar {self.name} (binary protocol)",
                int(self.web_port or 0): f"Pulsar {self.name} web service (admin REST API)",
            }
        return {self.port: "ZooKeeper" if self.kind == "zookeeper" else f"BookKeeper {self.name}"}


@dataclass(frozen=True)
class Cluster:
    """A multi-broker Pulsar: its ports, its state folder, its JVMs' settings."""

    name: str
    zookeeper_port: int
    bookie_ports: tuple[int, ...]
    broker_ports: tuple[int, ...]
    web_ports: tuple[int, ...]
    # Where its state lives (a test's cluster, on free ports); None: $STACK_DIR/<name>.
    directory: Path | None = None
    cluster_name: str = CLUSTER_NAME
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    # Lines appended to every broker's config (later keys win).
    extra_broker_config: str = ""
    zookeeper_jvm: tuple[str, ...] = ZOOKEEPER_JVM
    bookie_jvm: tuple[str, ...] = BOOKIE_JVM
    broker_jvm: tuple[str, ...] = BROKER_JVM
    servers: tuple[Server, ...] = field(init=False)

    def __post_init__(self) -> None:
        if len(self.broker_ports) != len(self.web_ports):
            raise ValueError("one web port per broker port")
        servers = [Server("zookeeper", "zookeeper", self.zookeeper_port)]
        servers += [
            Server(f"bookie-{n}", "bookie", port) for n, port in enumerate(self.bookie_ports, 1)
        ]
        servers += [
            Server(f"broker-{n}", "broker", port, web)
            for n, (port, web) in enumerate(zip(self.broker_ports, self.web_ports, strict=True), 1)
        ]
        object.__setattr__(self, "servers", tuple(servers))

    def server(self, name: str) -> Server:
        for server in self.servers:
            if server.name == name:
                return server
        raise KeyError(f"no server {name!r} in the {self.name} cluster")

    def of_kind(self, kind: str) -> list[Server]:
        return [server for server in self.servers if server.kind == kind]

    @property
    def brokers(self) -> list[Server]:
        return self.of_kind("broker")

    @property
    def bookies(self) -> list[Server]:
        return self.of_kind("bookie")

    @property
    def broker_url(self) -> str:
        """Every broker, as Pulsar clients take several: ``pulsar://h:p1,h:p2``."""
        return "pulsar://" + ",".join(f"{stack.HOST}:{port}" for port in self.broker_ports)

    @property
    def web_url(self) -> str:
        """Every broker's web service: ``http://h:p1,h:p2`` (Pulsar's admin clients take it)."""
        return "http://" + ",".join(f"{stack.HOST}:{port}" for port in self.web_ports)

    @property
    def zookeeper(self) -> str:
        return f"{stack.HOST}:{self.zookeeper_port}"

    @property
    def endpoints(self) -> stack.Endpoints:
        return stack.Endpoints(self.broker_url, self.web_url, self.zookeeper)

    def state_dir(self) -> Path:
        if self.directory is not None:
            return self.directory
        override = os.environ.get(f"STACK_{self.name.upper()}_DIR")
        return Path(override).resolve() if override else stack.stack_dir() / self.name


# The profile `stack.py --profile cluster` runs: beside the default (6650/8080/2181/3181) and
# secured (6661/8453/2191/3191) profiles, on ports of its own.
CLUSTER = Cluster(
    "cluster",
    zookeeper_port=2201,
    bookie_ports=(3201, 3202),
    broker_ports=(6670, 6671),
    web_ports=(8070, 8071),
)


def new_cluster(
    directory: Path,
    ports: list[int],
    *,
    session_timeout_ms: int = SESSION_TIMEOUT_MS,
    extra_broker_config: str = "",
) -> Cluster:
    """A cluster with its state in ``directory`` on the 7 ``ports`` given (ZooKeeper, two
    bookies, two brokers' binary and web ports), not started."""
    if len(ports) != 7:
        raise ValueError("7 ports: zookeeper, bookie x2, broker x2, web x2")
    zookeeper, bookie_1, bookie_2, broker_1, broker_2, web_1, web_2 = ports
    return Cluster(
        f"cluster-{zookeeper}",
        zookeeper_port=zookeeper,
        bookie_ports=(bookie_1, bookie_2),
        broker_ports=(broker_1, broker_2),
        web_ports=(web_1, web_2),
        directory=directory,
        session_timeout_ms=session_timeout_ms,
        extra_broker_config=extra_broker_config,
    )


# --- files ------------------------------------------------------------------------------------


def _pid_file(state: Path, server: Server) -> Path:
    return state / "pids" / f"{server.name}.pid"


def _log_file(state: Path, name: str) -> Path:
    return state / "logs" / f"{name}.log"


def _setup_marker(state: Path) -> Path:
    # Under data/: wiping the data (up --fresh) forgets that the metadata was initialised.
    return state / "data" / "metadata-initialised"


def _info_file(state: Path) -> Path:
    return state / "cluster.json"


def _read_record(state: Path, server: Server) -> stack._Record | None:
    try:
        data = json.loads(_pid_file(state, server).read_text())
        ticks = data.get("start_ticks")
        return stack._Record(
            pid=int(data["pid"]),
            start_ticks=str(ticks) if ticks is not None else None,
            started_at=float(data.get("started_at", 0.0)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_record(state: Path, server: Server, pid: int) -> None:
    stat = stack._proc_stat(pid)
    record = {"pid": pid, "start_ticks": stat[1] if stat else None, "started_at": time.time()}
    target = _pid_file(state, server)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, target)


def _running(state: Path, server: Server) -> stack._Record | None:
    """The server's record if its JVM runs; a stale pid file (the JVM was killed) is removed."""
    record = _read_record(state, server)
    if record is None:
        return None
    if stack._alive(record):
        return record
    _pid_file(state, server).unlink(missing_ok=True)
    return None


def _log_tail(state: Path, name: str, lines: int = 30) -> str:
    path = _log_file(state, name)
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"(no log at {path})"
    return f"last {len(tail)} lines of {path}:\n" + "\n".join(tail)


def _say(cluster: Cluster, message: str) -> None:
    stack._say(f"[{cluster.name}] {message}")


# --- configuration ----------------------------------------------------------------------------


def _render(template: str, target: Path, **values: object) -> Path:
    text = string.Template((TEMPLATES / template).read_text()).substitute(values)
    target.write_text(text)
    return target


def _write_configs(state: Path, cluster: Cluster, classpath: list[str]) -> dict[str, list[str]]:
    """Every server's config file and JVM argument file; returns each server's command line
    after ``java`` (regenerated on every start, from the templates and the cluster)."""
    conf = state / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    sync = os.environ.get("STACK_JOURNAL_SYNC", "false")
    commands: dict[str, list[str]] = {}
    for server in cluster.servers:
        tmp_dir = state / "tmp" / server.name  # native libraries are extracted per JVM
        tmp_dir.mkdir(parents=True, exist_ok=True)
        data = state / "data" / server.name
        if server.kind == "zookeeper":
            config = _render(
                "zookeeper.conf",
                conf / "zookeeper.conf",
                data_dir=data,
                port=server.port,
                force_sync="yes" if sync == "true" else "no",
            )
            jvm, main, args = cluster.zookeeper_jvm, ZOOKEEPER_MAIN, [str(config)]
        elif server.kind == "bookie":
            config = _render(
                "bookie.conf",
                conf / f"{server.name}.conf",
                port=server.port,
                loopback_interface=stack._loopback_interface(),
                zookeeper_port=cluster.zookeeper_port,
                session_timeout_ms=cluster.session_timeout_ms,
                directory=data,
                journal_sync_data=sync,
            )
            jvm, main, args = cluster.bookie_jvm, BOOKIE_MAIN, ["--conf", str(config)]
        else:
            config = _render(
                "broker.conf",
                conf / f"{server.name}.conf",
                cluster_name=cluster.cluster_name,
                broker_port=server.port,
                web_port=server.web_port,
                zookeeper_port=cluster.zookeeper_port,
                session_timeout_ms=cluster.session_timeout_ms,
                tmp_dir=tmp_dir,
            )
            if cluster.extra_broker_config:
                with config.open("a") as extra:
                    extra.write("\n" + cluster.extra_broker_config + "\n")
            jvm, main, args = cluster.broker_jvm, BROKER_MAIN, ["--broker-conf", str(config)]
        argfile = conf / f"{server.name}.jvm.args"
        argfile.write_text(
            "\n".join(stack._argfile_line(a) for a in _jvm_args(jvm, tmp_dir, classpath)) + "\n"
        )
        commands[server.name] = [f"@{argfile}", main, *args]
    return commands


def _jvm_args(options: tuple[str, ...], tmp_dir: Path, classpath: list[str]) -> list[str]:
    return [
        *options,
        *stack.JVM_FLAGS,
        *os.environ.get("STACK_JVM_OPTS", "").split(),
        f"-Dlog4j.configurationFile={stack.LOG4J2_CONFIG}",
        "-Dzookeeper.4lw.commands.whitelist=*",
        f"-Djava.io.tmpdir={tmp_dir}",
        "-cp",
        os.pathsep.join(classpath),
    ]


def _metadata_setup_command(cluster: Cluster, state: Path, classpath: list[str]) -> list[str]:
    tmp_dir = state / "tmp" / "metadata-setup"
    tmp_dir.mkdir(parents=True, exist_ok=True)
    argfile = state / "conf" / "metadata-setup.jvm.args"
    options = ("-Xmx128m", *_COMMON_JVM)
    argfile.write_text(
        "\n".join(stack._argfile_line(a) for a in _jvm_args(options, tmp_dir, classpath)) + "\n"
    )
    store = f"zk:{cluster.zookeeper}"
    return [
        stack._java(),
        f"@{argfile}",
        METADATA_SETUP_MAIN,
        "--cluster",
        cluster.cluster_name,
        "--metadata-store",
        store,
        "--configuration-metadata-store",
        store,
        "--web-service-url",
        cluster.web_url,
        "--broker-service-url",
        cluster.broker_url,
        # No BookKeeper stream storage (table service) and no transactions here.
        "--initial-num-stream-storage-containers",
        "0",
    ]


# --- health -----------------------------------------------------------------------------------


def _get_json(url: str, timeout: float = 5.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode())


def _broker_id(server: Server) -> str:
    """How Pulsar names a broker in /admin/v2/brokers/<cluster>: advertised address and web
    port."""
    return f"{stack.HOST}:{server.web_port}"


def _bookie_id(server: Server) -> str:
    return f"{stack.HOST}:{server.port}"


def _health_problem(cluster: Cluster) -> str | None:
    """None if ZooKeeper answers, every bookie is registered and every broker is active and
    serves the admin API; otherwise what is not so (cheap: no message written)."""
    if not stack._zookeeper_ok(cluster.zookeeper_port):
        return f"ZooKeeper at {cluster.zookeeper} does not answer"
    for server in cluster.brokers:
        if not stack._port_open(server.port):
            return f"{server.name} at {server.broker_url} does not accept connections"
        try:
            clusters = _get_json(f"{server.web_url}/admin/v2/clusters")
            active = _get_json(f"{server.web_url}/admin/v2/brokers/{cluster.cluster_name}")
            bookies = _get_json(f"{server.web_url}/admin/v2/bookies/all")
            namespaces = _get_json(f"{server.web_url}/admin/v2/namespaces/public")
        except (OSError, ValueError) as exc:
            return f"{server.name}'s admin API at {server.web_url} does not answer ({exc})"
        if not isinstance(clusters, list) or cluster.cluster_name not in clusters:
            return f"{server.name} lists clusters {clusters!r}"
        missing = [b.name for b in cluster.brokers if _broker_id(b) not in _strings(active)]
        if missing:
            return f"{server.name} does not list {', '.join(missing)} as active ({active!r})"
        listed = json.dumps(bookies)
        missing = [b.name for b in cluster.bookies if f'"{_bookie_id(b)}"' not in listed]
        if missing:
            return f"{server.name} does not see {', '.join(missing)} registered ({listed})"
        if "public/default" not in _strings(namespaces):
            return f"{server.name} lists namespaces {namespaces!r}, without public/default"
    return None


def _strings(value: object) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _brokers_health_problem(cluster: Cluster) -> str | None:
    """Each broker's own end-to-end check: it writes and reads a message on its heartbeat
    topic, through both bookies (ensembles of two)."""
    for server in cluster.brokers:
        url = f"{server.web_url}/admin/v2/brokers/health"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body = response.read().decode().strip()
        except (OSError, ValueError) as exc:
            return f"{server.name}'s health check fails ({exc})"
        if body != "ok":
            return f"{server.name}'s health check says {body!r}"
    return None


# --- start and stop ---------------------------------------------------------------------------


def _classpath() -> list[str]:
    """The default profile's cached classpath, read without its lock when complete (the file
    is replaced atomically): a default stack starting meanwhile holds that lock through its
    whole start. Otherwise ``stack.classpath()``, which may run Maven, under the lock."""
    key = hashlib.sha256(stack.POM.read_bytes()).hexdigest()[:16]
    cached = stack.stack_dir() / f"classpath-{key}.txt"
    with contextlib.suppress(OSError):
        entries = stack._read_classpath(cached)
        if entries and all(Path(entry).exists() for entry in entries):
            stack._check_classpath(entries, cached)
            return entries
    return stack.classpath()


def _port_taken(port: int) -> OSError | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the JVMs' server sockets: TIME_WAIT leftovers do not count as taken.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((stack.HOST, port))
        except OSError as exc:
            return exc
    return None


def _check_ports_free(server: Server) -> None:
    for port, what in server.ports.items():
        taken = _port_taken(port)
        if taken is not None:
            raise stack.StackError(
                f"port {port} ({what}) is already in use by another process "
                f"({taken.strerror}); find it with `ss -ltnp 'sport = :{port}'` and stop it"
            )


def _wait_ports_free(server: Server, timeout: float) -> None:
    """Until the server's ports can be bound again. A JVM's main thread shows as a zombie
    (which ``stack._alive`` counts as gone) while its other threads still exit and hold its
    sockets: right after SIGKILL the ports are still taken for a moment."""
    deadline = time.monotonic() + timeout
    while any(_port_taken(port) is not None for port in server.ports):
        if time.monotonic() >= deadline:
            return  # ensure_up names the port if it is still taken then
        time.sleep(stack.POLL_INTERVAL / 5)


def _launch(state: Path, server: Server, command: list[str]) -> subprocess.Popen[bytes]:
    log_file = _log_file(state, server.name)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.exists():
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    (state / "data" / server.name).mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        # A session of its own: Ctrl-C where `up` ran does not reach it; `down` stops it by pid.
        process = subprocess.Popen(
            [stack._java(), *command],
            cwd=state,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _write_record(state, server, process.pid)
    return process


def _wait(
    cluster: Cluster,
    what: str,
    problem: Callable[[], str | None],
    exited: Callable[[], str | None],
    since: float,
) -> None:
    """Poll ``problem`` until it is None; fail if a JVM started exits or the deadline passes."""
    deadline = since + stack.START_TIMEOUT
    next_report = time.monotonic() + 15.0
    while True:
        death = exited()
        if death is not None:
            raise stack.StackError(death)
        found = problem()
        if found is None:
            return
        now = time.monotonic()
        if now >= deadline:
            raise stack.StackError(
                f"the {cluster.name} cluster was not {what} {stack.START_TIMEOUT:.0f} s after "
                f"its launch ({found}); try `python3 scripts/stack.py down --profile "
                f"{cluster.name}` and `up` (or `up --fresh` to wipe its data); logs in "
                f"{cluster.state_dir() / 'logs'}"
            )
        if now >= next_report:
            _say(cluster, f"waiting ({now - since:.0f} s): {found}")
            next_report += 15.0
        time.sleep(stack.POLL_INTERVAL)


def _signal_and_wait(
    state: Path, records: list[tuple[Server, stack._Record]], signum: int = signal.SIGTERM
) -> None:
    """Signal every JVM at once, wait for all; SIGKILL those that outlive STOP_TIMEOUT."""
    for _server, record in records:
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signum)
    for server, record in records:
        if not stack._wait_gone(record, stack.STOP_TIMEOUT):
            _say_state(state, f"{server.name} (pid {record.pid}) outlived SIGTERM; SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGKILL)
            if not stack._wait_gone(record, stack.KILL_TIMEOUT):
                raise stack.StackError(f"pid {record.pid} survived SIGKILL")
        _pid_file(state, server).unlink(missing_ok=True)
        _wait_ports_free(server, stack.KILL_TIMEOUT)


def _say_state(state: Path, message: str) -> None:
    stack._say(f"[{state.name}] {message}")


def _stop_order(cluster: Cluster) -> list[list[Server]]:
    # Clients of a server go first: brokers write to bookies, everything uses ZooKeeper.
    return [cluster.brokers, cluster.bookies, cluster.of_kind("zookeeper")]


def _initialise_metadata(state: Path, cluster: Cluster, classpath: list[str]) -> None:
    """PulsarClusterMetadataSetup, once per data folder (it is idempotent, but a JVM run)."""
    if _setup_marker(state).exists():
        return
    started = time.monotonic()
    log_file = _log_file(state, "metadata-setup")
    with log_file.open("w") as log:
        try:
            result = subprocess.run(
                _metadata_setup_command(cluster, state, classpath),
                cwd=state,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=METADATA_SETUP_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise stack.StackError(
                f"PulsarClusterMetadataSetup did not finish in {METADATA_SETUP_TIMEOUT:.0f} s; "
                + _log_tail(state, "metadata-setup")
            ) from exc
    if result.returncode != 0:
        raise stack.StackError(
            f"PulsarClusterMetadataSetup failed (exit {result.returncode}); "
            + _log_tail(state, "metadata-setup")
        )
    _setup_marker(state).write_text(f"{time.time()}\n")
    _say(cluster, f"cluster metadata initialised in {time.monotonic() - started:.1f} s")


def _write_info(state: Path, cluster: Cluster) -> None:
    target = _info_file(state)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(info(cluster), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, target)


# --- public API -------------------------------------------------------------------------------


def info(cluster: Cluster = CLUSTER) -> dict[str, object]:
    """What a client needs: the URLs (every broker), ZooKeeper, each server's address."""
    return {
        "profile": cluster.name,
        "cluster": cluster.cluster_name,
        "broker_url": cluster.broker_url,
        "web_url": cluster.web_url,
        "zookeeper": cluster.zookeeper,
        "brokers": {
            server.name: {"broker_url": server.broker_url, "web_url": server.web_url}
            for server in cluster.brokers
        },
        "bookies": {server.name: _bookie_id(server) for server in cluster.bookies},
        "state_dir": str(cluster.state_dir()),
    }


def pid(cluster: Cluster, name: str) -> int | None:
    """The pid of the named server's JVM while it runs."""
    record = _running(cluster.state_dir(), cluster.server(name))
    return None if record is None else record.pid


def ensure_up(cluster: Cluster = CLUSTER, fresh: bool = False) -> bool:
    """Make sure every server of the cluster runs and the cluster is healthy; True if this
    call started any JVM.

    Idempotent: what runs is left alone, what is gone (never started, stopped, killed) is
    started on its data, in dependency order (ZooKeeper, metadata, bookies, brokers), and the
    call returns when every broker passes its end-to-end health check. ``fresh`` stops
    everything and wipes the data first.
    """
    started = time.monotonic()
    state = cluster.state_dir()
    with stack._locked(state):
        if fresh:
            _stop_all(state, cluster)
            for folder in (state / "data", state / "tmp"):
                if folder.exists():
                    shutil.rmtree(folder)
            _say(cluster, f"wiped {state / 'data'}")
        dead = [server for server in cluster.servers if _running(state, server) is None]
        if not dead:
            if _health_problem(cluster) is not None:
                _say(cluster, "every JVM runs but the cluster is not healthy yet; waiting")
                _wait(cluster, "healthy", lambda: _health_problem(cluster), lambda: None, started)
            _say(cluster, f"already up (checked in {time.monotonic() - started:.2f} s)")
            return False
        for server in dead:
            _check_ports_free(server)
        classpath = _classpath()
        commands = _write_configs(state, cluster, classpath)
        launched: dict[str, subprocess.Popen[bytes]] = {}

        def exited() -> str | None:
            for name, process in launched.items():
                code = process.poll()
                if code is not None:
                    return f"{name} exited with code {code} while starting; " + _log_tail(
                        state, name
                    )
            return None

        try:
            for kind in ("zookeeper", "bookie", "broker"):
                for server in dead:
                    if server.kind == kind:
                        launched[server.name] = _launch(state, server, commands[server.name])
                if kind == "zookeeper":
                    _wait(
                        cluster,
                        "serving ZooKeeper",
                        lambda: (
                            None
                            if stack._zookeeper_ok(cluster.zookeeper_port)
                            else "ZooKeeper does not answer yet"
                        ),
                        exited,
                        started,
                    )
                    _initialise_metadata(state, cluster, classpath)
            names = ", ".join(server.name for server in dead)
            _say(cluster, f"started {names}; waiting until healthy")
            _wait(
                cluster,
                "healthy",
                lambda: _health_problem(cluster) or _brokers_health_problem(cluster),
                exited,
                started,
            )
        except BaseException:
            # Never leave a half-started JVM of ours holding the ports.
            with contextlib.suppress(stack.StackError):
                ours = [
                    (server, record)
                    for server in reversed(cluster.servers)
                    if server.name in launched
                    and (record := _read_record(state, server)) is not None
                ]
                _signal_and_wait(state, ours)
            for process in launched.values():
                process.wait()
            raise
        _write_info(state, cluster)
        _say(
            cluster,
            f"up in {time.monotonic() - started:.1f} s: brokers {cluster.broker_url}, web "
            f"{cluster.web_url}, zookeeper {cluster.zookeeper}; logs in {state / 'logs'}",
        )
        return True


def _stop_all(state: Path, cluster: Cluster) -> list[str]:
    stopped: list[str] = []
    for group in _stop_order(cluster):
        records = [
            (server, record) for server in group if (record := _running(state, server)) is not None
        ]
        _signal_and_wait(state, records)
        stopped += [server.name for server, _ in records]
    return stopped


def down(cluster: Cluster = CLUSTER) -> bool:
    """Stop every JVM of the cluster that `up` started (brokers, bookies, then ZooKeeper).
    True if it stopped any."""
    state = cluster.state_dir()
    started = time.monotonic()
    with stack._locked(state):
        stopped = _stop_all(state, cluster)
    if not stopped:
        _say(cluster, f"nothing to stop: no JVM of the cluster runs (state in {state})")
        return False
    _say(cluster, f"stopped {', '.join(stopped)} in {time.monotonic() - started:.1f} s")
    return True


def stop_server(cluster: Cluster, name: str, *, kill: bool = False) -> None:
    """Stop one server: SIGTERM as an operator does (``kill``: SIGKILL, a crash: nothing is
    closed or flushed by the JVM). ``ensure_up`` starts it again on its data."""
    state = cluster.state_dir()
    server = cluster.server(name)
    with stack._locked(state):
        record = _running(state, server)
        if record is None:
            raise stack.StackError(f"{name} of the {cluster.name} cluster is not running")
        if kill:
            os.kill(record.pid, signal.SIGKILL)
            if not stack._wait_gone(record, stack.KILL_TIMEOUT):
                raise stack.StackError(f"{name} (pid {record.pid}) survived SIGKILL")
            _pid_file(state, server).unlink(missing_ok=True)
            _wait_ports_free(server, stack.KILL_TIMEOUT)
        else:
            _signal_and_wait(state, [(server, record)])


def is_up(cluster: Cluster = CLUSTER) -> bool:
    """True if every JVM of the cluster runs and the cluster is healthy."""
    state = cluster.state_dir()
    running = all(_read_record(state, s) is not None for s in cluster.servers)
    return running and _down_message(cluster) is None


def _down_message(cluster: Cluster) -> str | None:
    state = cluster.state_dir()
    gone = [server.name for server in cluster.servers if _running(state, server) is None]
    if gone:
        return f"down: {', '.join(gone)} not running (state in {state})"
    problem = _health_problem(cluster)
    return None if problem is None else f"down: every JVM runs but {problem}"


def status(cluster: Cluster = CLUSTER, as_json: bool = False) -> bool:
    """Print whether the cluster is up (every JVM runs, the cluster is healthy); True if it is.
    ``as_json`` prints, when up, ``info()`` as a JSON object."""
    problem = _down_message(cluster)
    if problem is not None:
        print(problem, file=sys.stderr if as_json else sys.stdout)
        return False
    if as_json:
        print(json.dumps(info(cluster), indent=2, sort_keys=True))
        return True
    state = cluster.state_dir()
    pids = ", ".join(f"{s.name} {pid(cluster, s.name)}" for s in cluster.servers)
    print(
        f"up: {pids}; brokers {cluster.broker_url}, web {cluster.web_url}, zookeeper "
        f"{cluster.zookeeper}; state in {state}"
    )
    return True


def run(command: str, *, fresh: bool = False, as_json: bool = False) -> int:
    """``stack.py <command> --profile cluster``: the exit status."""
    if command == "up":
        ensure_up(CLUSTER, fresh=fresh)
        return 0
    if command == "down":
        down(CLUSTER)
        return 0
    return 0 if status(CLUSTER, as_json=as_json) else 3


__all__ = [
    "CLUSTER",
    "Cluster",
    "Server",
    "down",
    "ensure_up",
    "info",
    "is_up",
    "new_cluster",
    "pid",
    "run",
    "status",
    "stop_server",
]
