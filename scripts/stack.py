#!/usr/bin/env python3
"""Start, stop and query the local stack: Apache Pulsar standalone with its own ZooKeeper.

    python3 scripts/stack.py up [--fresh]  # fetch Pulsar with Maven, start it, wait until healthy
    python3 scripts/stack.py status         # exit 0 if up, 3 if down
    python3 scripts/stack.py down           # stop exactly what `up` started
    python3 scripts/stack.py up --profile secured   # a second, independent Pulsar: TLS + tokens
    python3 scripts/stack.py up --profile cluster   # 2 brokers, 2 bookies, ZooKeeper: 5 JVMs

Pulsar (pinned in scripts/pulsar/pom.xml) comes from Maven Central through the local Maven
repository (~/.m2); it runs as ``org.apache.pulsar.PulsarStandaloneStarter`` in ZooKeeper mode, on
loopback, with the configuration in scripts/pulsar/. Everything it writes (data, logs, pid file,
cached classpath) lives under one folder: ``$STACK_DIR``, by default ``<repo>/.stack``. Data is
kept across down/up so a warm start is quick; ``up --fresh`` wipes it.

Python callers (the test suite, benchmarks) import this file by path and use ``ensure_up()``,
``is_up()``, ``down()`` and the ``BROKER_URL`` / ``WEB_URL`` / ``ZOOKEEPER`` constants.

Profiles: ``default`` (the stack above) and ``secured``, a second standalone Pulsar with its own
ports and folder (``$STACK_DIR/secured``) that accepts only TLS, authenticates with JWTs and TLS
client certificates, and enforces authorization. ``up --profile secured`` generates its CA,
certificates, HMAC key and tokens with the ``openssl`` command and the standard library, and
writes where everything is to ``secured.json`` (``secured_info()`` reads it). Each profile has its
own lock and pid file: starting or stopping one never touches the other.

Standard library only: it must run with the system python3 before the project's venv exists.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import shutil
import signal
import socket
import ssl
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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


# --- profiles --------------------------------------------------------------------------------

# The secured profile: every port the standalone JVM opens moves, so it runs beside the default
# one. Its plaintext broker and web ports are disabled (empty in its config): only TLS is served.
SECURED_BROKER_TLS_PORT = 6661
SECURED_WEB_TLS_PORT = 8453
SECURED_ZOOKEEPER_PORT = 2191
SECURED_BOOKIE_PORT = 3191

# Roles of the secured profile: the `sub` claim of its tokens, or a client certificate's CN.
SUPERUSER_ROLE = "gateway"  # the gateway's token
CLIENT_CERT_ROLE = "gateway-client"  # the gateway's TLS client certificate
BROKER_ROLE = "pulsar-broker"  # the broker's own internal client (health checks, namespaces)
USER_ROLE = "app"  # authenticated, allowed nothing until granted
SUPERUSER_ROLES = (SUPERUSER_ROLE, CLIENT_CERT_ROLE, BROKER_ROLE)


@dataclass(frozen=True)
class Profile:
    """One independent standalone Pulsar: its own ports, state folder, lock and pid file."""

    name: str
    broker_port: int
    web_port: int
    zookeeper_port: int
    bookie_port: int
    tls: bool
    # Memory limits and other JVM options of this profile (STACK_JVM_OPTS comes after them).
    jvm_options: tuple[str, ...] = field(default=tuple(JVM_MEMORY))
    # Where its state lives, for a stack made at run time (the fault tests' own, on free
    # ports); None: the rule of state_dir().
    directory: Path | None = None
    # Lines appended to its standalone.conf (later keys win), e.g. another advertisedAddress.
    extra_config: str = ""

    @property
    def broker_url(self) -> str:
        return f"{'pulsar+ssl' if self.tls else 'pulsar'}://{HOST}:{self.broker_port}"

    @property
    def web_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{HOST}:{self.web_port}"

    @property
    def zookeeper(self) -> str:
        return f"{HOST}:{self.zookeeper_port}"

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints(self.broker_url, self.web_url, self.zookeeper)

    @property
    def ports(self) -> dict[int, str]:
        """What each port is for, to name it when something else holds it."""
        over = " over TLS" if self.tls else ""
        return {
            self.broker_port: f"Pulsar broker (binary protocol{over})",
            self.web_port: f"Pulsar web service (admin REST API{over})",
            self.zookeeper_port: "ZooKeeper",
            self.bookie_port: "BookKeeper bookie",
        }

    def state_dir(self) -> Path:
        """The default profile's folder is $STACK_DIR; the others live inside it (so they are
        ignored by git like it), or wherever $STACK_<NAME>_DIR says."""
        if self.directory is not None:
            return self.directory
        if self.name == "default":
            return stack_dir()
        override = os.environ.get(f"STACK_{self.name.upper()}_DIR")
        return Path(override).resolve() if override else stack_dir() / self.name


DEFAULT = Profile("default", BROKER_PORT, WEB_PORT, ZOOKEEPER_PORT, BOOKIE_PORT, tls=False)
# It only serves the secured tests, beside the default stack: less memory, and the C1 compiler
# only (-XX:TieredStopAtLevel=1), which halves the JVM's start (measured 5.6-6.3 s instead of
# 10.6-12.7 s to healthy) at the cost of peak throughput that functional tests never need.
SECURED = Profile(
    "secured",
    SECURED_BROKER_TLS_PORT,
    SECURED_WEB_TLS_PORT,
    SECURED_ZOOKEEPER_PORT,
    SECURED_BOOKIE_PORT,
    tls=True,
    jvm_options=(
        "-Xms128m",
        "-Xmx512m",
        "-XX:MaxDirectMemorySize=256m",
        "-XX:+ExitOnOutOfMemoryError",
        "-XX:TieredStopAtLevel=1",
    ),
)
PROFILES = {profile.name: profile for profile in (DEFAULT, SECURED)}
# The multi-broker profile (ZooKeeper, bookies and brokers as JVMs of their own) lives in
# scripts/stack_cluster.py; `--profile cluster` hands the command to it.
CLUSTER_PROFILE = "cluster"


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


def _web_get(profile: Profile, path: str, timeout: float) -> str:
    """GET on the profile's web service; the secured one with its CA and the superuser token."""
    headers: dict[str, str] = {}
    context: ssl.SSLContext | None = None
    if profile.tls:
        files = _CredentialFiles(profile.state_dir())
        context = ssl.create_default_context(cafile=str(files.ca_cert))
        headers["Authorization"] = "Bearer " + files.superuser_token.read_text().strip()
    request = urllib.request.Request(profile.web_url + path, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
        return str(response.read().decode())


def _get_json(profile: Profile, path: str, timeout: float = 5.0) -> object:
    return json.loads(_web_get(profile, path, timeout))


def _zookeeper_ok(port: int, timeout: float = 3.0) -> bool:
    """ZooKeeper answers `ruok` with `imok` (standalone whitelists the four-letter words)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as sock:
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


def _health_problem(profile: Profile) -> str | None:
    """None if the broker, its admin API and ZooKeeper all answer; otherwise what does not."""
    try:
        clusters = _get_json(profile, "/admin/v2/clusters")
        if not isinstance(clusters, list) or "standalone" not in clusters:
            return f"admin API lists clusters {clusters!r}, without 'standalone'"
        namespaces = _get_json(profile, "/admin/v2/namespaces/public")
        if not isinstance(namespaces, list) or "public/default" not in namespaces:
            return f"admin API lists namespaces {namespaces!r}, without 'public/default'"
    except (OSError, ValueError) as exc:  # URLError, HTTPError and SSLError are OSErrors
        return f"admin API at {profile.web_url} does not answer ({exc})"
    if not _zookeeper_ok(profile.zookeeper_port):
        return f"ZooKeeper at {profile.zookeeper} does not answer"
    if not _port_open(profile.broker_port):
        return f"broker at {profile.broker_url} does not accept connections"
    return None


def _broker_health_problem(profile: Profile) -> str | None:
    """The broker's own end-to-end check: it writes and reads a message on a heartbeat topic."""
    try:
        body = _web_get(profile, "/admin/v2/brokers/health", timeout=30).strip()
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


def is_up(profile: Profile = DEFAULT) -> bool:
    """True if the profile's stack recorded in its state folder is running and healthy."""
    record = _read_record(profile.state_dir())
    return record is not None and _alive(record) and _health_problem(profile) is None


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
    if not cached.exists():
        # Another profile resolved the same pom: no need to run Maven again. Its file is
        # replaced atomically, so reading it without that profile's lock is safe.
        others = (profile.state_dir() / cached.name for profile in PROFILES.values())
        shared = next((path for path in others if path != cached and path.exists()), None)
        if shared is not None:
            shutil.copyfile(shared, cached)
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


# --- the secured profile: keys, certificates, tokens ------------------------------------------

CREDENTIALS_DAYS = 3650  # test material: long enough never to expire under a developer
OPENSSL_TIMEOUT = 60.0


@dataclass(frozen=True)
class _CredentialFiles:
    """Where the secured profile keeps its generated credentials (under its state folder)."""

    state: Path

    @property
    def tls_dir(self) -> Path:
        return self.state / "tls"

    @property
    def auth_dir(self) -> Path:
        return self.state / "auth"

    @property
    def ca_cert(self) -> Path:
        return self.tls_dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.tls_dir / "ca.key"

    @property
    def broker_cert(self) -> Path:
        return self.tls_dir / "broker.crt"

    @property
    def broker_key(self) -> Path:
        return self.tls_dir / "broker.key"

    @property
    def client_cert(self) -> Path:
        return self.tls_dir / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.tls_dir / "client.key"

    @property
    def secret_key(self) -> Path:
        return self.auth_dir / "secret.key"

    def token(self, role: str) -> Path:
        return self.auth_dir / f"{role}.token"

    @property
    def superuser_token(self) -> Path:
        return self.token(SUPERUSER_ROLE)

    def all(self) -> list[Path]:
        return [
            self.ca_cert,
            self.ca_key,
            self.broker_cert,
            self.broker_key,
            self.client_cert,
            self.client_key,
            self.secret_key,
            *(self.token(role) for role in (*SUPERUSER_ROLES, USER_ROLE)),
        ]


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def mint_token(subject: str, secret: bytes) -> str:
    """An HS256 JWT whose only claim is ``sub`` (no expiry), as ``pulsar tokens create`` makes.

    Pulsar's AuthenticationProviderToken takes the role from ``sub``; jjwt wants an HMAC key of
    at least 256 bits, hence 32-byte secrets.
    """
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = _b64url(json.dumps({"sub": subject}, separators=(",", ":")).encode())
    signing_input = f"{header}.{claims}"
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise StackError(
            "`openssl` is not on PATH: the secured profile generates its CA and certificates "
            "with it (Debian: apt-get install openssl)"
        )
    try:
        result = subprocess.run(
            [openssl, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=OPENSSL_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StackError(
            f"openssl {args[0]} did not finish within {OPENSSL_TIMEOUT:.0f} s"
        ) from exc
    if result.returncode != 0:
        raise StackError(
            f"openssl {' '.join(args[:2])} failed (exit {result.returncode}): "
            + result.stderr.decode(errors="replace").strip()[-800:]
        )


def _issue(
    files: _CredentialFiles, cert: Path, key: Path, subject: str, extensions: list[str]
) -> None:
    """A new RSA key and a certificate for it signed by the profile's CA."""
    request = cert.with_suffix(".csr")
    extfile = cert.with_suffix(".ext")
    extfile.write_text("\n".join(extensions) + "\n")
    # `req -nodes` writes an unencrypted PKCS#8 key ("BEGIN PRIVATE KEY"): the form the broker's
    # netty TLS and the Pulsar clients read.
    _openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-subj",
        subject,
        "-out",
        str(request),
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(request),
        "-CA",
        str(files.ca_cert),
        "-CAkey",
        str(files.ca_key),
        "-set_serial",
        str(int.from_bytes(os.urandom(8), "big")),
        "-days",
        str(CREDENTIALS_DAYS),
        "-sha256",
        "-extfile",
        str(extfile),
        "-out",
        str(cert),
    )
    request.unlink()
    extfile.unlink()


def _ensure_credentials(state: Path, profile: Profile) -> None:
    """Generate the CA, broker and client certificates, the HMAC key and the tokens, unless all
    are there already (they survive down/up and --fresh: the tokens stay valid), then write the
    profile's info file."""
    files = _CredentialFiles(state)
    if not all(path.exists() for path in files.all()):
        started = time.monotonic()
        for folder in (files.tls_dir, files.auth_dir):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-sha256",
            "-days",
            str(CREDENTIALS_DAYS),
            "-subj",
            "/CN=Starlight local test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            str(files.ca_key),
            "-out",
            str(files.ca_cert),
        )
        leaf = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
        ]
        _issue(
            files,
            files.broker_cert,
            files.broker_key,
            "/CN=localhost",
            [*leaf, "extendedKeyUsage=serverAuth", f"subjectAltName=IP:{HOST},DNS:localhost"],
        )
        # AuthenticationProviderTls takes the role from the client certificate's CN.
        _issue(
            files,
            files.client_cert,
            files.client_key,
            f"/CN={CLIENT_CERT_ROLE}",
            [*leaf, "extendedKeyUsage=clientAuth"],
        )
        secret = os.urandom(32)
        files.secret_key.write_bytes(secret)
        for role in (*SUPERUSER_ROLES, USER_ROLE):
            files.token(role).write_text(mint_token(role, secret) + "\n")
        for path in files.all():
            path.chmod(0o600)
        _say_for(
            profile,
            f"generated a CA, certificates and tokens in {time.monotonic() - started:.1f} s",
        )
    _write_info(state, profile, files)


def _secured_config(profile: Profile, files: _CredentialFiles) -> str:
    """The keys appended to the standalone config for the secured profile.

    Appended after the template: the broker reads the file as java.util.Properties, where a
    later key wins, but none of these keys is in the template (the bookie, reading the same file
    with commons-configuration, would turn a repeated key into a list).
    """
    token_provider = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
    tls_provider = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
    return f"""
### --- Secured profile (appended by scripts/stack.py) --- ###
# TLS only: brokerServicePort and webServicePort are empty above, which disables them.
brokerServicePortTls={profile.broker_port}
webServicePortTls={profile.web_port}
tlsCertificateFilePath={files.broker_cert}
tlsKeyFilePath={files.broker_key}
# The CA that signs client certificates (TLS authentication); a client certificate is optional.
tlsTrustCertsFilePath={files.ca_cert}
tlsAllowInsecureConnection=false
tlsRequireTrustedClientCertOnConnect=false
# Who may connect: a JWT signed with the profile's HMAC key, or a client certificate (its CN).
authenticationEnabled=true
authenticationProviders={token_provider},{tls_provider}
tokenSecretKey=file://{files.secret_key}
# What they may do: superusers everything, other roles only what they were granted.
authorizationEnabled=true
superUserRoles={",".join(SUPERUSER_ROLES)}
# The broker's own client (health checks, system topics, namespace creation) over TLS, as a
# superuser.
brokerClientTlsEnabled=true
brokerClientTrustCertsFilePath={files.ca_cert}
brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken
brokerClientAuthenticationParameters=file://{files.token(BROKER_ROLE)}
"""


def _info_file(state: Path) -> Path:
    return state / "secured.json"


def _endpoint_info(profile: Profile) -> dict[str, object]:
    return {
        "profile": profile.name,
        "broker_url": profile.broker_url,
        "web_url": profile.web_url,
        "zookeeper": profile.zookeeper,
        "cluster": "standalone",
    }


def _write_info(state: Path, profile: Profile, files: _CredentialFiles) -> None:
    """What tests and people need to use the secured stack, in one JSON file."""
    info: dict[str, object] = {
        **_endpoint_info(profile),
        "ca_cert": str(files.ca_cert),
        "broker_cert": str(files.broker_cert),
        "broker_hostnames": [HOST, "localhost"],
        "client_cert": str(files.client_cert),
        "client_key": str(files.client_key),
        "client_role": CLIENT_CERT_ROLE,
        "superuser_role": SUPERUSER_ROLE,
        "superuser_roles": list(SUPERUSER_ROLES),
        "superuser_token": files.superuser_token.read_text().strip(),
        "superuser_token_file": str(files.superuser_token),
        "user_role": USER_ROLE,
        "user_token": files.token(USER_ROLE).read_text().strip(),
        "user_token_file": str(files.token(USER_ROLE)),
        "secret_key_file": str(files.secret_key),
    }
    target = _info_file(state)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    tmp.chmod(0o600)
    os.replace(tmp, target)


def secured_info(profile: Profile = SECURED) -> dict[str, object]:
    """The secured profile's URLs, file paths, roles and tokens (written by ``up``)."""
    try:
        data = json.loads(_info_file(profile.state_dir()).read_text())
    except (OSError, ValueError) as exc:
        raise StackError(
            f"no usable {_info_file(profile.state_dir())} ({exc}); "
            f"run `python3 scripts/stack.py up{_flag(profile)}`"
        ) from exc
    if not isinstance(data, dict):
        raise StackError(f"{_info_file(profile.state_dir())} does not hold a JSON object")
    return data


# --- start and stop --------------------------------------------------------------------------


def _check_ports_free(profile: Profile) -> None:
    """Fail naming the port if anything listens where we need it: the broker's and the web
    service's ports on the config's bindAddress, the others on any address (they bind all)."""
    on_host = {profile.broker_port, profile.web_port}
    for port, what in profile.ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # Same as the JVM's server sockets: TIME_WAIT leftovers do not count as taken.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                # A listener on another loopback address (a test's proxy on the broker's
                # advertised address) does not take the port from the broker.
                sock.bind((HOST if port in on_host else "0.0.0.0", port))
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


def _write_config(state: Path, classpath: list[str], profile: Profile) -> tuple[Path, Path]:
    """The broker/bookie config and the JVM argument file, regenerated on every start."""
    conf_dir = state / "conf"
    tmp_dir = state / "tmp"
    conf_dir.mkdir(parents=True, exist_ok=True)
    tmp_dir.mkdir(parents=True, exist_ok=True)
    config = string.Template(CONF_TEMPLATE.read_text()).substitute(
        # An empty port disables that listener (Pulsar reads it as an empty Optional): the
        # secured profile serves TLS only, on the ports its own section adds.
        broker_port="" if profile.tls else profile.broker_port,
        web_port="" if profile.tls else profile.web_port,
        tmp_dir=tmp_dir,
        journal_sync_data=os.environ.get("STACK_JOURNAL_SYNC", "false"),
        loopback_interface=_loopback_interface(),
    )
    if profile.tls:
        config += _secured_config(profile, _CredentialFiles(state))
    config += profile.extra_config
    conf_file = conf_dir / "standalone.conf"
    conf_file.write_text(config)

    jvm_args = [
        *profile.jvm_options,
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


def _start(state: Path, classpath: list[str], profile: Profile) -> subprocess.Popen[bytes]:
    data = state / "data"
    data.mkdir(parents=True, exist_ok=True)
    log_file = _log_file(state)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.exists():
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    conf_file, argfile = _write_config(state, classpath, profile)
    command = [
        _java(),
        f"@{argfile}",
        MAIN_CLASS,
        "--config",
        str(conf_file),
        "--no-functions-worker",
        "--no-stream-storage",
        "--zookeeper-port",
        str(profile.zookeeper_port),
        "--zookeeper-dir",
        str(data / "zookeeper"),
        "--bookkeeper-port",
        str(profile.bookie_port),
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


def _wait_healthy(
    state: Path, profile: Profile, exited: Callable[[], str | None], since: float
) -> None:
    """Poll until healthy; fail if the JVM exits or START_TIMEOUT passes after `since`."""
    deadline = since + START_TIMEOUT
    next_report = time.monotonic() + 15.0
    while True:
        death = exited()
        if death is not None:
            raise StackError(f"Pulsar {death} while starting; {_log_tail(state)}")
        problem = _health_problem(profile) or _broker_health_problem(profile)
        if problem is None:
            return
        now = time.monotonic()
        if now >= deadline:
            raise StackError(
                f"Pulsar was not healthy {START_TIMEOUT:.0f} s after its launch ({problem}); "
                f"try `python3 scripts/stack.py down{_flag(profile)}` and `up{_flag(profile)}` "
                f"(or `up --fresh{_flag(profile)}` to wipe its data); "
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


def _wipe_data(state: Path, profile: Profile) -> None:
    # ZooKeeper and bookie data go together: a bookie whose cookie is not in ZooKeeper refuses
    # to start.
    for folder in (state / "data", state / "tmp"):
        if folder.exists():
            shutil.rmtree(folder)
    _say_for(profile, f"wiped {state / 'data'}")


# --- public API ------------------------------------------------------------------------------


def _flag(profile: Profile) -> str:
    """The command-line option naming a profile, for messages (nothing for the default)."""
    return "" if profile is DEFAULT else f" --profile {profile.name}"


def _say_for(profile: Profile, message: str) -> None:
    _say(message if profile is DEFAULT else f"[{profile.name}] {message}")


def ensure_up(fresh: bool = False, profile: Profile = DEFAULT) -> bool:
    """Make sure the profile's stack runs and is healthy. True if this call started it.

    Idempotent: if the stack recorded in the state folder is up and healthy, returns at once.
    ``fresh`` stops a running stack and wipes its data first. Only the profile's own folder,
    pid file and ports are involved: the other profiles are never touched.
    """
    started = time.monotonic()
    state = profile.state_dir()

    def say(message: str) -> None:
        _say_for(profile, message)

    with _locked(state):
        waited = time.monotonic() - started
        if waited > 1.0:
            say(f"waited {waited:.1f} s for another `stack.py` run to finish")
        record = _read_record(state)
        if record is not None and not _alive(record):
            say(f"removing stale pid file (pid {record.pid} is gone)")
            _pid_file(state).unlink(missing_ok=True)
            record = None
        if record is not None and fresh:
            say(f"stopping pid {record.pid} for a fresh start")
            _stop(state, record)
            record = None
        if record is not None:
            if _health_problem(profile) is not None:
                # Alive but not healthy: most likely still starting (its `up` was interrupted).
                say(f"pid {record.pid} runs but is not healthy yet; waiting for it")
                recorded = record
                since = started - max(0.0, time.time() - recorded.started_at)
                _wait_healthy(state, profile, lambda: None if _alive(recorded) else "exited", since)
            say(f"already up (pid {record.pid}; checked in {time.monotonic() - started:.2f} s)")
            return False
        if fresh:
            _wipe_data(state, profile)
        _check_ports_free(profile)
        classpath = _classpath(state)
        if profile.tls:
            _ensure_credentials(state, profile)
        process = _start(state, classpath, profile)
        _write_record(state, process.pid)
        say(f"started Apache Pulsar {PULSAR_VERSION} standalone (pid {process.pid}); waiting")

        def exited() -> str | None:
            code = process.poll()
            return None if code is None else f"exited with code {code}"

        try:
            _wait_healthy(state, profile, exited, time.monotonic())
        except BaseException:
            # Never leave a half-started JVM holding the ports.
            with contextlib.suppress(StackError):
                _stop(state, _read_record(state) or _Record(process.pid, None, 0.0))
            process.wait()
            raise
        say(
            f"up in {time.monotonic() - started:.1f} s: broker {profile.broker_url}, "
            f"web {profile.web_url}, zookeeper {profile.zookeeper}; "
            f"logs in {_log_file(state).parent}"
        )
        if profile.tls:
            say(f"credentials and URLs: {_info_file(state)}")
        return True


def down(profile: Profile = DEFAULT) -> bool:
    """Stop the profile's stack that `up` started (by its recorded pid). True if it stopped one."""
    state = profile.state_dir()
    with _locked(state):
        record = _read_record(state)
        if record is None:
            _say_for(profile, "nothing to stop: no stack recorded in " + str(state))
            return False
        if not _alive(record):
            _pid_file(state).unlink(missing_ok=True)
            _say_for(
                profile,
                f"nothing to stop: pid {record.pid} was already gone (removed its pid file)",
            )
            return False
        started = time.monotonic()
        _stop(state, record)
        _say_for(profile, f"stopped pid {record.pid} in {time.monotonic() - started:.1f} s")
        return True


def _down_message(profile: Profile) -> str | None:
    """None if the profile's stack is up and healthy, else why it is down."""
    state = profile.state_dir()
    record = _read_record(state)
    if record is None:
        return f"down (no stack recorded in {state})"
    if not _alive(record):
        return f"down (pid {record.pid} recorded, but gone)"
    problem = _health_problem(profile)
    if problem is not None:
        return f"down: pid {record.pid} runs but is not healthy: {problem}"
    return None


def status(profile: Profile = DEFAULT, as_json: bool = False) -> bool:
    """Print whether the profile's stack is up; True if it is.

    ``as_json`` prints, when up, what a client needs as one JSON object: the endpoints, and for
    the secured profile the CA, client certificate, tokens and roles (``secured_info()``).
    """
    problem = _down_message(profile)
    if problem is not None:
        print(problem, file=sys.stderr if as_json else sys.stdout)
        return False
    if as_json:
        info = secured_info(profile) if profile.tls else _endpoint_info(profile)
        print(json.dumps(info, indent=2, sort_keys=True))
        return True
    state = profile.state_dir()
    record = _read_record(state)
    uptime = time.time() - record.started_at if record else 0.0
    pid = record.pid if record else "?"
    details = f"; credentials and URLs in {_info_file(state)}" if profile.tls else ""
    print(
        f"up: pid {pid} for {uptime:.0f} s; broker {profile.broker_url}, web {profile.web_url}, "
        f"zookeeper {profile.zookeeper}; state in {state}{details}"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    profile_help = (
        "which stack: default (6650/8080/2181), secured (TLS + tokens, 6661/8453/2191) or "
        "cluster (2 brokers 6670,6671/8070,8071, 2 bookies, ZooKeeper 2201: stack_cluster.py)"
    )
    up_parser = commands.add_parser("up", help="start the stack (if needed) and wait until healthy")
    up_parser.add_argument(
        "--fresh", action="store_true", help="stop it if running and wipe its data first"
    )
    down_parser = commands.add_parser("down", help="stop the stack that `up` started")
    status_parser = commands.add_parser("status", help="print up/down; exit 0 if up, 3 if down")
    status_parser.add_argument(
        "--json", action="store_true", help="when up, print the endpoints (and credentials) as JSON"
    )
    for sub in (up_parser, down_parser, status_parser):
        sub.add_argument(
            "--profile",
            choices=sorted([*PROFILES, CLUSTER_PROFILE]),
            default="default",
            help=profile_help,
        )
    args = parser.parse_args(argv)
    try:
        if args.profile == CLUSTER_PROFILE:
            # Five JVMs rather than one: its own module, beside this file. It imports
            # `stack`: this very module, not a second copy whose StackError the clause below
            # would not catch.
            if str(SCRIPTS_DIR) not in sys.path:
                sys.path.insert(0, str(SCRIPTS_DIR))
            sys.modules.setdefault("stack", sys.modules[__name__])
            import stack_cluster

            return stack_cluster.run(
                args.command,
                fresh=getattr(args, "fresh", False),
                as_json=getattr(args, "json", False),
            )
        profile = PROFILES[args.profile]
        if args.command == "up":
            ensure_up(fresh=args.fresh, profile=profile)
            return 0
        if args.command == "down":
            down(profile)
            return 0
        return 0 if status(profile, as_json=args.json) else 3
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
