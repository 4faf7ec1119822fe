#!/usr/bin/env python3
"""A real Apache Pulsar proxy with the gateway's proxy extension (the NAR of extension_shim/)
loaded, on the local stack: the reference's proxy-extension quick start, on this machine.

    python3 scripts/pulsar_proxy.py run     # `make run-proxy`: build the NAR if needed, start
                                            # the stack if needed, run the proxy until Ctrl-C

The proxy runs from the local stack's Pulsar classpath (``stack.classpath()``: pulsar-proxy is
on it) with Pulsar's own JVM flags. Tests and benchmarks use ``write_proxy_conf`` and
``start_proxy`` to run their own proxies on free ports. Stdlib only, like stack.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import stack

PROXY_MAIN_CLASS = "org.apache.pulsar.proxy.server.ProxyServiceStarter"
SHIM_DIR = stack.REPO_DIR / "extension_shim"
MAVEN_SETTINGS = SHIM_DIR / "maven-settings.xml"


def nar_path() -> Path:
    """Where ``make shim`` leaves the NAR (the version is the gateway's, from pom.xml)."""
    found = sorted((SHIM_DIR / "target").glob("starlight-rabbitmq-*.nar"))
    if not found:
        raise stack.StackError("no NAR in extension_shim/target: run `make shim`")
    return found[-1]


def build_nar(*, tests: bool = False) -> Path:
    """Build the NAR with Maven (the Surefire tests only when ``tests``); return its path."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise stack.StackError("`mvn` is not on PATH: Maven 3 builds the proxy extension")
    command = [
        mvn,
        "--batch-mode",
        "--no-transfer-progress",
        "--quiet",
        "-s",
        str(MAVEN_SETTINGS),
        "-f",
        str(SHIM_DIR / "pom.xml"),
        "package",
    ]
    if not tests:
        command.append("-DskipTests")
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "[ERROR]" in line][:5]
        raise stack.StackError("Maven could not build the proxy extension:\n" + "\n".join(errors))
    return nar_path()


def fresh_nar() -> Path:
    """The NAR when it is newer than every source of extension_shim/ (``make shim`` ran since
    the last change), else ``build_nar()``: tests need not run Maven twice."""
    try:
        nar = nar_path()
    except stack.StackError:
        return build_nar()
    sources = [SHIM_DIR / "pom.xml", *(f for f in (SHIM_DIR / "src").rglob("*") if f.is_file())]
    if nar.stat().st_mtime >= max(f.stat().st_mtime for f in sources):
        return nar
    return build_nar()


def write_proxy_conf(
    directory: Path,
    *,
    nar: Path,
    broker_url: str,
    web_url: str,
    zookeeper: str,
    service_port: int,
    web_port: int,
    amqp_port: int,
    extra: Mapping[str, str] | None = None,
) -> Path:
    """``directory/proxy.conf`` for a proxy in front of the given Pulsar, with the extension
    installed as the reference says (proxyExtensions, proxyExtensionsDirectory, amqpListeners);
    ``extra`` adds or replaces keys (e.g. amqpGatewayCommand, amqpProxyMode)."""
    extensions = directory / "proxyextensions"
    extensions.mkdir(parents=True, exist_ok=True)
    for old in extensions.glob("*.nar"):
        old.unlink()
    shutil.copy(nar, extensions / nar.name)
    broker_port = broker_url.rsplit(":", 1)[1]
    keys = {
        # The proxy itself (ProxyServiceStarter); it finds the brokers by URL, no metadata store.
        "brokerServiceURL": broker_url,
        "brokerWebServiceURL": web_url,
        "bindAddress": "127.0.0.1",
        "advertisedAddress": "127.0.0.1",
        "servicePort": str(service_port),
        "webServicePort": str(web_port),
        "clusterName": "standalone",
        "brokerProxyAllowedTargetPorts": broker_port,
        "narExtractionDirectory": str(directory / "nar"),
        # The reference's proxy-extension quick start.
        "proxyExtensions": "rabbitmq",
        "proxyExtensionsDirectory": str(extensions),
        "amqpListeners": f"amqp://127.0.0.1:{amqp_port}",
        # The gateway's own key the proxy does not have (reference/002: the same file).
        "configurationStoreServers": zookeeper,
        **(extra or {}),
    }
    conf = directory / "proxy.conf"
    conf.write_text("".join(f"{key}={value}\n" for key, value in keys.items()))
    return conf


def proxy_command(conf: Path) -> list[str]:
    jvm = [
        "-Xms128m",
        "-Xmx512m",
        *stack.JVM_FLAGS,
        f"-Dlog4j.configurationFile={stack.LOG4J2_CONFIG}",
        "-cp",
        os.pathsep.join(stack.classpath()),
    ]
    return [stack._java(), *jvm, PROXY_MAIN_CLASS, "--config", str(conf)]


def start_proxy(
    conf: Path, log: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ProxyServiceStarter on ``conf``, its output (the gateway's too) into ``log``."""
    with log.open("ab") as out:
        return subprocess.Popen(
            proxy_command(conf),
            cwd=conf.parent,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _gateway_command() -> str:
    """The repository's own gateway command (its virtualenv), else the one on PATH."""
    local = stack.REPO_DIR / ".venv" / "bin" / "starlight-rabbitmq"
    return str(local) if local.exists() else "starlight-rabbitmq"


def run(amqp_port: int, service_port: int, web_port: int) -> int:
    stack.ensure_up()
    nar = build_nar()
    directory = stack.stack_dir() / "proxy"
    endpoints = stack.DEFAULT.endpoints
    conf = write_proxy_conf(
        directory,
        nar=nar,
        broker_url=endpoints.broker_url,
        web_url=endpoints.web_url,
        zookeeper=endpoints.zookeeper,
        service_port=service_port,
        web_port=web_port,
        amqp_port=amqp_port,
        extra={"amqpGatewayCommand": _gateway_command()},
    )
    print(f"pulsar proxy with the rabbitmq extension: {conf}")
    print(f"AMQP on amqp://127.0.0.1:{amqp_port} (try: .venv/bin/python scripts/smoke_pika.py)")
    process = subprocess.Popen(proxy_command(conf), cwd=directory)
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.send_signal(signal.SIGTERM)
        return process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser("run", help="run a Pulsar proxy with the extension until Ctrl-C")
    run_parser.add_argument("--amqp-port", type=int, default=5672)
    run_parser.add_argument("--service-port", type=int, default=6651)
    run_parser.add_argument("--web-port", type=int, default=8089)
    args = parser.parse_args(argv)
    try:
        return run(args.amqp_port, args.service_port, args.web_port)
    except stack.StackError as error:
        print(f"pulsar_proxy: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
