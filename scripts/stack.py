#!/usr/bin/env python3
"""Start, stop and query the local stack: Apache Pulsar standalone with its own ZooKeeper.

    python3 scripts/stack.py up [--fresh]  # fetch Pulsar with Maven, start it, wait until healthy
    python3 scripts/stack.py status         # exit 0 if up, 3 if down
    python3 scripts/stack.py down           # stop exactly what `up` started

Pulsar (pinned in scripts/pulsar/pom.xml) comes from Maven Central through the local Maven
repository (~/.m2); it runs as ``org.apache.pulsar.PulsarStandaloneStarter`` in ZooKeeper mode, on
loopback, with the configuration in scripts/pulsar/. Everything it writes (data, logs, pid file,
cached classpath) lives under one folder: ``$STACK_DIR``, by default ``<repo>/.stack``. Data is
kept across down/up so a warm start is quick; ``up --fresh`` wipes it.

Python callers (the test suite, benchmarks) import this file by path and use ``ensure_up()``,
``is_up()``, ``down()`` and the ``BROKER_URL`` / ``WEB_URL`` / ``ZOOKEEPER`` constants.

Standard library only: it must run with the system python3 before the project's venv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
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
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PULSAR_VERSION = "4.0.8"
MAIN_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"

HOST = "127.0.0.1"
BROKER_PORT = 6650
WEB_PORT = 8080
ZOOKEEPER_PORT = 2181
BOOKIE_PORT = 3181

BROKER_URL = f"pulsar://{HOST}:{BROKER_PORT}"
WEB_URL = f"http://{HOST}:{WEB_PORT}"
ZOOKEEPER = f"{HOST}:{ZOOKEEPER_PORT}"

# What each port is for, to name it when something else holds it.
PORTS = {
    BROKER_PORT: "Pulsar broker (binary protocol)",
    WEB_PORT: "Pulsar web service (admin REST API)",
    ZOOKEEPER_PORT: "ZooKeeper",
    BOOKIE_PORT: "BookKeeper bookie",
}

SCRIPTS_DIR = Path(__file__).resolve().parent
REPO_DIR = SCRIPTS_DIR.parent
PULSAR_DIR = SCRIPTS_DIR / "pulsar"
POM = PULSAR_DIR / "pom.xml"
CONF_TEMPLATE = PULSAR_DIR / "standalone.conf"
LOG4J2_CONFIG = PULSAR_DIR / "log4j2.xml"

# Deadlines (seconds). A cold JVM on two busy cores needs ~30 s; leave a wide margin.
START_TIMEOUT = float(os.environ.get("STACK_START_TIMEOUT", "300"))
STOP_TIMEOUT = 45.0
KILL_TIMEOUT = 15.0
MAVEN_TIMEOUT = 3600.0
POLL_INTERVAL = 0.25

# Pulsar's own launcher (bin/pulsar) uses these on Java 17+; netty and BookKeeper need them.
JVM_FLAGS = [
    "--add-opens",
    "java.base/java.io=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens",
    "java.base/java.nio=ALL-UNNAMED",
    "--add-opens",
    "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens",
    "java.base/sun.net=ALL-UNNAMED",
    "--add-opens",
    "java.management/sun.management=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.leakDetectionLevel=disabled",
    "-Dio.netty.recycler.maxCapacityPerThread=4096",
]
# Modest memory: the stack shares a 2-core machine with the test suite and the gateway.
JVM_MEMORY = ["-Xms256m", "-Xmx1g", "-XX:MaxDirectMemorySize=512m", "-XX:+ExitOnOutOfMemoryError"]

# Files that must be on the classpath. BookKeeper's native helpers are published with packaging
# "nar": depending on how they are resolved they arrive as .jar or .nar files (same zip content,
# classes plus lib/*.so). A `lib/*.jar` glob would silently drop the .nar ones, so the classpath
# is always Maven's explicit list of files, and this list is checked.
REQUIRED_ON_CLASSPATH = [
    f"pulsar-broker-{PULSAR_VERSION}.",
    f"pulsar-proxy-{PULSAR_VERSION}.",
    "log4j-core-",
    "log4j-slf4j2-impl-",
    "circe-checksum-",
    "native-io-",
    "cpu-affinity-",
]


class StackError(RuntimeError):
    """The stack could not be started, stopped or queried; the message says why and what next."""


@dataclass(frozen=True)
class Endpoints:
    """Where the stack's services answer."""

    broker_url: str = BROKER_URL
    web_url: str = WEB_URL
    zookeeper: str = ZOOKEEPER


ENDPOINTS = Endpoints()


@dataclass(frozen=True)
class _Record:
    """What `up` wrote about the JVM it started: enough to recognise it again (pid reuse)."""

    pid: int
    start_ticks: str | None
    started_at: float


# --- locations -------------------------------------------------------------------------------


def stack_dir() -> Path:
    """The state folder: $STACK_DIR, or <repo>/.stack (ignored by git)."""
    override = os.environ.get("STACK_DIR")
    return Path(override).resolve() if override else REPO_DIR / ".stack"


def _pid_file(state: Path) -> Path:
    return state / "pulsar.pid"


def _log_file(state: Path) -> Path:
    return state / "logs" / "pulsar.log"


def _say(message: str) -> None:
    print(f"stack: {message}", flush=True)


# --- process bookkeeping ---------------------------------------------------------------------


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks) from /proc/<pid>/stat, or None if there is no such pid."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], fields[19]  # fields 3 (state) and 22 (starttime) of proc(5)


def _reap(pid: int) -> None:
    """Collect the exit status if the JVM is our child (ensure_up() in this same process)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(record: _Record) -> bool:
    """True if the recorded JVM still runs (and the pid was not reused by something else)."""
    _reap(record.pid)
    if Path("/proc/self/stat").exists():
        stat = _proc_stat(record.pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return record.start_ticks is None or stat[1] == record.start_ticks
    try:  # no procfs: the best we can do is ask whether the pid exists
        os.kill(record.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_record(state: Path) -> _Record | None:
    try:
        data = json.loads(_pid_file(state).read_text())
        start_ticks = data.get("start_ticks")
        return _Record(
            pid=int(data["pid"]),
            start_ticks=str(start_ticks) if start_ticks is not None else None,
            started_at=float(data.get("started_at", 0.0)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _write_record(state: Path, pid: int) -> None:
    stat = _proc_stat(pid)
    record = {"pid": pid, "start_ticks": stat[1] if stat else None, "started_at": time.time()}
    tmp = _pid_file(state).with_suffix(".tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, _pid_file(state))


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    """Serialise up/down between processes (two test sessions starting at once)."""
    state.mkdir(parents=True, exist_ok=True)
    with (state / "stack.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _log_tail(state: Path, lines: int = 40) -> str:
    try:
        text = _log_file(state).read_text(errors="replace")
    except OSError:
        return "(no log written)"
    tail = text.splitlines()[-lines:]
    return f"last {len(tail)} lines of {_log_file(state)}:\n" + "\n".join(tail)


# --- health ----------------------------------------------------------------------------------


def _get_json(path: str, timeout: float = 5.0) -> object:
    with urllib.request.urlopen(WEB_URL + path, timeout=timeout) as response:
        return json.loads(response.read().decode())


def _zookeeper_ok(timeout: float = 3.0) -> bool:
    """ZooKeeper answers `ruok` with `imok` (standalone whitelists the four-letter words)."""
    try:
        with socket.create_connection((HOST, ZOOKEEPER_PORT), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            reply = sock.recv(16)
    except OSError:
        return False
    # An empty reply means the command is not whitelisted, but ZooKeeper did accept the connection.
    return reply in (b"imok", b"")


def _port_open(port: int, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _health_problem() -> str | None:
    """None if the broker, its admin API and ZooKeeper all answer; otherwise what does not."""
    try:
        clusters = _get_json("/admin/v2/clusters")
        if not isinstance(clusters, list) or "standalone" not in clusters:
            return f"admin API lists clusters {clusters!r}, without 'standalone'"
        namespaces = _get_json("/admin/v2/namespaces/public")
        if not isinstance(namespaces, list) or "public/default" not in namespaces:
            return f"admin API lists namespaces {namespaces!r}, without 'public/default'"
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        return f"admin API at {WEB_URL} does not answer ({exc})"
    if not _zookeeper_ok():
        return f"ZooKeeper at {ZOOKEEPER} does not answer"
    if not _port_open(BROKER_PORT):
        return f"broker at {BROKER_URL} does not accept connections"
    return None


def _broker_health_problem() -> str | None:
    """The broker's own end-to-end check: it writes and reads a message on a heartbeat topic."""
    try:
        with urllib.request.urlopen(WEB_URL + "/admin/v2/brokers/health", timeout=30) as response:
            body = response.read().decode().strip()
    except (OSError, ValueError) as exc:
        return f"broker health check fails ({exc})"
    return None if body == "ok" else f"broker health check says {body!r}"


def classpath() -> list[str]:
    """The Pulsar classpath (broker, proxy, log4j2), resolving it with Maven if not cached.

    For callers that start other Pulsar JVMs from the same jars, e.g. the proxy
    (``org.apache.pulsar.proxy.server.ProxyServiceStarter``) with the gateway's extension; use
    them with ``JVM_FLAGS``.
    """
    state = stack_dir()
    with _locked(state):
        return _classpath(state)


def is_up() -> bool:
    """True if the stack recorded in the state folder is running and healthy."""
    record = _read_record(stack_dir())
    return record is not None and _alive(record) and _health_problem() is None


# --- Maven: the classpath --------------------------------------------------------------------


def _check_classpath(entries: list[str], source: Path) -> None:
    names = [Path(entry).name for entry in entries]
    missing = [m for m in REQUIRED_ON_CLASSPATH if not any(n.startswith(m) for n in names)]
    if missing:
        raise StackError(
            f"the classpath from {source} lacks {', '.join(m + '*' for m in missing)} "
            f"(.jar or .nar); check {POM}"
        )


def _read_classpath(path: Path) -> list[str]:
    return [entry for entry in path.read_text().strip().split(os.pathsep) if entry]


def _classpath(state: Path) -> list[str]:
    """Maven's list of files for the pom, cached per pom content; resolves (downloads) if needed."""
    key = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    cached = state / f"classpath-{key}.txt"
    if cached.exists():
        entries = _read_classpath(cached)
        gone = [entry for entry in entries if not Path(entry).exists()]
        if not gone:
            _check_classpath(entries, cached)
            return entries
        _say(f"{len(gone)} classpath entries left the Maven repository (e.g. {gone[0]}); resolving")

    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("`mvn` is not on PATH: Maven 3 is needed to fetch Apache Pulsar")
    maven_log = state / "logs" / "maven.log"
    maven_log.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(".partial")
    command = [
        mvn,
        "--batch-mode",
        "--no-transfer-progress",
        "-f",
        str(POM),
        "dependency:build-classpath",
        f"-Dmdep.outputFile={partial}",
        "-Dmdep.includeScope=runtime",
    ]
    _say(
        f"resolving Apache Pulsar {PULSAR_VERSION} with Maven into the local repository "
        f"(the first time this downloads ~270 MB from Maven Central; log: {maven_log})"
    )
    started = time.monotonic()
    with maven_log.open("w") as log:
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=MAVEN_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(f"Maven did not finish within {MAVEN_TIMEOUT:.0f} s") from exc
    if result.returncode != 0 or not partial.exists():
        lines = maven_log.read_text(errors="replace").splitlines()
        errors = [line for line in lines if "[ERROR]" in line][:5] or lines[-20:]
        raise StackError(
            f"Maven failed (exit {result.returncode}) resolving {POM}:\n"
            + "\n".join(errors)
            + f"\n(full log: {maven_log})"
        )
    entries = _read_classpath(partial)
    _check_classpath(entries, partial)
    for old in state.glob("classpath-*.txt"):
        old.unlink()
    os.replace(partial, cached)
    _say(f"classpath: {len(entries)} files, resolved in {time.monotonic() - started:.1f} s")
    return entries


# --- start and stop --------------------------------------------------------------------------


def _check_ports_free() -> None:
    """Fail naming the port if anything listens on one we need (on any address)."""
    for port, what in PORTS.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # Same as the JVM's server sockets: TIME_WAIT leftovers do not count as taken.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError as exc:
                raise StackError(
                    f"port {port} ({what}) is already in use by another process ({exc.strerror}); "
                    f"find it with `ss -ltnp 'sport = :{port}'` and stop it"
                ) from exc


def _argfile_line(argument: str) -> str:
    # Java @argfiles: double quotes group, backslash escapes inside quotes.
    return '"' + argument.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _loopback_interface() -> str:
    names = {name for _, name in socket.if_nameindex()}
    return next((name for name in ("lo", "lo0") if name in names), "lo")


def _write_config(state: Path, classpath: list[str]) -> tuple[Path, Path]:
    """The broker/bookie config and the JVM argument file, regenerated on every start."""
    conf_dir = state / "conf"
    tmp_dir = state / "tmp"
    conf_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    config = string.Template(CONF_TEMPLATE.read_text()).substitute(
        broker_port=BROKER_PORT,
        web_port=WEB_PORT,
        tmp_dir=tmp_dir,
        journal_sync_data=os.environ.get("STACK_JOURNAL_SYNC", "false"),
        loopback_interface=_loopback_interface(),
    )
    conf_file = conf_dir / "standalone.conf"
    conf_file.write_text(config)

    jvm_args = [
        *JVM_MEMORY,
        *JVM_FLAGS,
        *os.environ.get("STACK_JVM_OPTS", "").split(),
        f"-Dlog4j.configurationFile={LOG4J2_CONFIG}",
        # ZooKeeper's four-letter words (`ruok`, `srvr`, `mntr`) for health checks and debugging.
        "-Dzookeeper.4lw.commands.whitelist=*",
        f"-Djava.io.tmpdir={tmp_dir}",
        "-cp",
        os.pathsep.join(classpath),
    ]
    argfile = conf_dir / "jvm.args"
    argfile.write_text("\n".join(_argfile_line(a) for a in jvm_args) + "\n")
    return conf_file, argfile


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise StackError("`java` (17 or newer) is not on PATH and JAVA_HOME is not set")
    return java


def _start(state: Path, classpath: list[str]) -> subprocess.Popen[bytes]:
    data = state / "data"
    data.mkdir(parents=True, exist_ok=True)
    log_file = _log_file(state)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.exists():
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    conf_file, argfile = _write_config(state, classpath)
    command = [
        _java(),
        f"@{argfile}",
        MAIN_CLASS,
        "--config",
        str(conf_file),
        "--no-functions-worker",
        "--no-stream-storage",
        "--zookeeper-port",
        str(ZOOKEEPER_PORT),
        "--zookeeper-dir",
        str(data / "zookeeper"),
        "--bookkeeper-port",
        str(BOOKIE_PORT),
        # The single bookie appends its index: data/bookie0.
        "--bookkeeper-dir",
        str(data / "bookie"),
    ]
    # ZooKeeper mode: the gateways keep their metadata in this ZooKeeper (RocksDB mode has none).
    env = {**os.environ, "PULSAR_STANDALONE_USE_ZOOKEEPER": "1"}
    with log_file.open("ab") as log:
        # A session of its own: Ctrl-C in the terminal or test run that started it does not reach
        # it; `down` (or the test session that started it) stops it by pid.
        return subprocess.Popen(
            command,
            cwd=state,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_healthy(state: Path, exited: Callable[[], str | None], since: float) -> None:
    """Poll until healthy; fail if the JVM exits or START_TIMEOUT passes after `since`."""
    deadline = since + START_TIMEOUT
    next_report = time.monotonic() + 15.0
    while True:
        death = exited()
        if death is not None:
            raise StackError(f"Pulsar {death} while starting; {_log_tail(state)}")
        problem = _health_problem() or _broker_health_problem()
        if problem is None:
            return
        now = time.monotonic()
        if now >= deadline:
            raise StackError(
                f"Pulsar was not healthy {START_TIMEOUT:.0f} s after its launch ({problem}); "
                f"try `python3 scripts/stack.py down` and `up` (or `up --fresh` to wipe its data); "
                f"{_log_tail(state)}"
            )
        if now >= next_report:
            _say(f"waiting ({now - since:.0f} s after launch): {problem}")
            next_report += 15.0
        time.sleep(POLL_INTERVAL)


def _wait_gone(record: _Record, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(record):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


def _stop(state: Path, record: _Record) -> None:
    """SIGTERM (Pulsar's shutdown hook closes broker, bookie, ZooKeeper), SIGKILL if it hangs."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    if not _wait_gone(record, STOP_TIMEOUT):
        _say(f"pid {record.pid} ignored SIGTERM for {STOP_TIMEOUT:.0f} s; sending SIGKILL")
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
        if not _wait_gone(record, KILL_TIMEOUT):
            raise StackError(f"pid {record.pid} survived SIGKILL; not removing its pid file")
    _pid_file(state).unlink(missing_ok=True)


def _wipe_data(state: Path) -> None:
    # ZooKeeper and bookie data go together: a bookie whose cookie is not in ZooKeeper refuses
    # to start.
    for folder in (state / "data", state / "tmp"):
        if folder.exists():
            shutil.rmtree(folder)
    _say(f"wiped {state / 'data'}")


# --- public API ------------------------------------------------------------------------------


def ensure_up(fresh: bool = False) -> bool:
    """Make sure the stack runs and is healthy. True if this call started it.

    Idempotent: if the stack recorded in the state folder is up and healthy, returns at once.
    ``fresh`` stops a running stack and wipes its data first.
    """
    started = time.monotonic()
    state = stack_dir()
    with _locked(state):
        waited = time.monotonic() - started
        if waited > 1.0:
            _say(f"waited {waited:.1f} s for another `stack.py` run to finish")
        record = _read_record(state)
        if record is not None and not _alive(record):
            _say(f"removing stale pid file (pid {record.pid} is gone)")
            _pid_file(state).unlink(missing_ok=True)
            record = None
        if record is not None and fresh:
            _say(f"stopping pid {record.pid} for a fresh start")
            _stop(state, record)
            record = None
        if record is not None:
            if _health_problem() is not None:
                # Alive but not healthy: most likely still starting (its `up` was interrupted).
                _say(f"pid {record.pid} runs but is not healthy yet; waiting for it")
                recorded = record
                since = started - max(0.0, time.time() - recorded.started_at)
                _wait_healthy(state, lambda: None if _alive(recorded) else "exited", since)
            _say(f"already up (pid {record.pid}; checked in {time.monotonic() - started:.2f} s)")
            return False
        if fresh:
            _wipe_data(state)
        _check_ports_free()
        classpath = _classpath(state)
        process = _start(state, classpath)
        _write_record(state, process.pid)
        _say(f"started Apache Pulsar {PULSAR_VERSION} standalone (pid {process.pid}); waiting")

        def exited() -> str | None:
            code = process.poll()
            return None if code is None else f"exited with code {code}"

        try:
            _wait_healthy(state, exited, time.monotonic())
        except BaseException:
            # Never leave a half-started JVM holding the ports.
            with contextlib.suppress(StackError):
                _stop(state, _read_record(state) or _Record(process.pid, None, 0.0))
            process.wait()
            raise
        _say(
            f"up in {time.monotonic() - started:.1f} s: broker {BROKER_URL}, "
            f"web {WEB_URL}, zookeeper {ZOOKEEPER}; logs in {_log_file(state).parent}"
        )
        return True


def down() -> bool:
    """Stop the stack that `up` started (by its recorded pid). True if something was stopped."""
    state = stack_dir()
    with _locked(state):
        record = _read_record(state)
        if record is None:
            _say("nothing to stop: no stack recorded in " + str(state))
            return False
        if not _alive(record):
            _pid_file(state).unlink(missing_ok=True)
            _say(f"nothing to stop: pid {record.pid} was already gone (removed its pid file)")
            return False
        started = time.monotonic()
        _stop(state, record)
        _say(f"stopped pid {record.pid} in {time.monotonic() - started:.1f} s")
        return True


def status() -> bool:
    """Print whether the stack is up; True if it is."""
    state = stack_dir()
    record = _read_record(state)
    if record is None:
        print("down (no stack recorded in " + str(state) + ")")
        return False
    if not _alive(record):
        print(f"down (pid {record.pid} recorded, but gone)")
        return False
    problem = _health_problem()
    if problem is not None:
        print(f"down: pid {record.pid} runs but is not healthy: {problem}")
        return False
    uptime = time.time() - record.started_at
    print(
        f"up: pid {record.pid} for {uptime:.0f} s; broker {BROKER_URL}, web {WEB_URL}, "
        f"zookeeper {ZOOKEEPER}; state in {state}"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    up_parser = commands.add_parser("up", help="start the stack (if needed) and wait until healthy")
    up_parser.add_argument(
        "--fresh", action="store_true", help="stop it if running and wipe its data first"
    )
    commands.add_parser("down", help="stop the stack that `up` started")
    commands.add_parser("status", help="print up/down; exit 0 if up, 3 if down")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            ensure_up(fresh=args.fresh)
            return 0
        if args.command == "down":
            down()
            return 0
        return 0 if status() else 3
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
