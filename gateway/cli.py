"""The ``starlight-rabbitmq`` command: read the configuration, serve until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from functools import partial
from typing import Final, NoReturn

import trio

from gateway import __version__
from gateway.app import fleet_summary, load_every_vhost, open_gateway, server_settings
from gateway.auth.authorization import open_authorization
from gateway.auth.factory import authenticator_for
from gateway.auth.tls_context import build_server_context
from gateway.backend.interface import Backend
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.metadata.store import MetadataUnavailable
from gateway.model.vhost import VhostMapper
from gateway.observability.http import Endpoints, MetricsServer
from gateway.observability.metrics import Identity
from gateway.server.collector import tune_collector
from gateway.server.listeners import bind_tcp, reuse_port_supported
from gateway.server.monitoring import Monitoring, worker_node
from gateway.server.server import GatewayServer, StartupError
from gateway.server.supervisor_metrics import SupervisorMetrics
from gateway.server.workers import Supervisor, WorkerLink, worker_command

log = logging.getLogger("gateway")

EXIT_CONFIG_ERROR = 2
EXIT_STARTUP_ERROR = 1

# The subcommands, each with its own parser (`starlight-rabbitmq <command> --help`) and exit
# codes, as `--help` lists them; without one the command runs the gateway.
SUBCOMMANDS: Final = {
    "rollup": "sum the usage events per vhost and time window (a Spark job; extra [rollup])",
    "permissions": "set, clear or list a user's permissions on a vhost, as rabbitmqctl does",
    "vhosts": "add, delete or list vhosts (the Pulsar namespaces they map to)",
}


def _subcommands_help() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = [f"  {name:<{width}}  {summary}" for name, summary in SUBCOMMANDS.items()]
    return "\n".join(
        [
            "commands:",
            *lines,
            "",
            "Without a command it runs the gateway. See `starlight-rabbitmq <command> --help`.",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="starlight-rabbitmq",
        description="An AMQP 0-9-1 gateway that runs RabbitMQ applications on Apache Pulsar.",
        epilog=_subcommands_help(),
        # The epilog's table as written; the options' help is still wrapped.
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="configuration file of key=value lines (see conf/gateway.conf); "
        "STARLIGHT_<key> environment variables override it",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (DEBUG also logs frames, truncated to amqpDebugBinaryDataLength)",
    )
    parser.add_argument(
        "--workers",
        type=_worker_count,
        default=1,
        metavar="N",
        help="run N worker processes, each a full gateway replica, sharing the listener "
        "ports (SO_REUSEPORT); one process uses one core (default: 1, a single process)",
    )
    parser.add_argument(
        "--stop-on-stdin-close",
        action="store_true",
        help="stop (as on SIGTERM) when standard input reaches its end: for a supervisor that "
        "holds the other end of a pipe, such as the Pulsar proxy extension, so that the gateway "
        "never outlives it, even when it is killed",
    )
    # Internal: how the supervisor of --workers starts each worker (see gateway/server/workers).
    parser.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-fd", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    args = parser.parse_args(argv)
    if (args.worker_index is None) != (args.worker_fd is None):
        parser.error("--worker-index and --worker-fd go together")
    return args


def _worker_count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError("at least 1")
    return count


class _Stopper:
    """Turns stop requests (signals, the supervisor going away) into the right kind of stop:
    before the gateway serves there are no clients to drain, so start-up is cancelled; while
    it serves, the first request drains (Connection.Close 320), a second one stops at once."""

    def __init__(self, scope: trio.CancelScope) -> None:
        self._scope = scope
        self.server: GatewayServer | None = None
        self.monitoring: Monitoring | None = None
        self.requested = False

    def request(self, why: str) -> None:
        if self.requested:
            log.warning("%s again: stopping at once", why)
            self._scope.cancel()
            return
        self.requested = True
        if self.monitoring is not None:
            self.monitoring.draining()  # /readyz answers 503 from now on
        if self.server is None:
            log.info("%s during start-up: stopping", why)
            self._scope.cancel()
        else:
            log.info("%s: shutting down", why)
            self.server.request_stop()


async def serve(
    config: GatewayConfig, link: WorkerLink | None = None, *, stop_on_stdin_close: bool = False
) -> None:
    """Serve until stopped. ``link``: this process is a worker of a ``--workers`` gateway.
    ``stop_on_stdin_close``: standard input reaching its end stops the gateway too."""
    async with trio.open_nursery() as nursery:
        stopper = _Stopper(nursery.cancel_scope)
        # From the very start: a stop during start-up (loading vhosts can take seconds)
        # ends the process cleanly instead of killing it with the signal's default action.
        nursery.start_soon(_stop_on_signals, stopper)
        if link is not None:
            nursery.start_soon(_stop_when_supervisor_gone, link, stopper)
        if stop_on_stdin_close:
            nursery.start_soon(_stop_when_stdin_closes, stopper)
        await _run_gateway(config, link, stopper)
        nursery.cancel_scope.cancel()


async def _run_gateway(config: GatewayConfig, link: WorkerLink | None, stopper: _Stopper) -> None:
    settings = server_settings(config)
    # Token keys and certificates are loaded before Pulsar is contacted: bad key material is
    # a one-line configuration error at once.
    authenticator = authenticator_for(config)
    if settings.tls is not None:
        build_server_context(settings.tls)
    log.info("%s", fleet_summary(config))
    async with open_gateway(config) as runtime, contextlib.AsyncExitStack() as stack:
        backend: Backend = runtime.backend
        if config.authorizationEnabled:
            backend = await stack.enter_async_context(_authorization(config, backend))
        server = GatewayServer(settings, authenticator, backend, reuse_port=link is not None)
        # Bind before loading, so that a taken port is a one-line error at once, not after
        # a long load; connections are refused until serve() listens.
        await server.bind()
        try:
            async with trio.open_nursery() as background:
                # Served from the start: /healthz answers and /readyz says what is missing
                # while the vhosts load.
                monitoring = Monitoring(
                    config,
                    runtime,
                    node=worker_node(config.node_name, None if link is None else link.index),
                    listen=_metrics_address(config, link),
                )
                metrics_port = await background.start(monitoring.run)
                stopper.monitoring = monitoring
                readiness = await load_every_vhost(runtime)
                monitoring.metadata_loaded()
                log.info("%s", readiness.summary())
                if config.managementListener is not None:
                    # RabbitMQ's management API (docs/management.md), on a loaded view.
                    from gateway.management.service import run_management

                    await background.start(
                        partial(
                            run_management,
                            config,
                            runtime,
                            server,
                            authenticator,
                            node=worker_node(
                                config.node_name, None if link is None else link.index
                            ),
                            readiness=monitoring.readiness,
                            reuse_port=link is not None,
                        )
                    )
                async with trio.open_nursery() as nursery:
                    await nursery.start(server.serve)
                    monitoring.listening()
                    stopper.server = server
                    if link is not None:
                        await link.ready(metrics_port)
                background.cancel_scope.cancel()
        finally:
            server.close_sockets()


def _metrics_address(config: GatewayConfig, link: WorkerLink | None) -> tuple[str, int] | None:
    """Where this process serves /metrics: a worker of ``--workers`` on a free loopback port
    that only its supervisor reads (the supervisor serves metricsListener, summed)."""
    if config.metricsListener is None:
        return None
    if link is not None:
        return ("127.0.0.1", 0)
    return (config.metricsListener.host, config.metricsListener.port)


@contextlib.asynccontextmanager
async def _authorization(config: GatewayConfig, backend: Backend) -> AsyncIterator[Backend]:
    """``backend`` behind the permissions in ZooKeeper, loaded before the first client is
    accepted (docs/authorization.md)."""
    try:
        async with open_authorization(
            backend,
            zookeeper=config.configurationStoreServers,
            session_timeout=config.zookeeper_session_timeout,
            superusers=config.superUserRoles,
            mapper=VhostMapper.from_keys(config),
        ) as authorized:
            yield authorized
    except MetadataUnavailable as error:
        raise StartupError(f"cannot load the permissions: {error}") from None


async def _stop_on_signals(stopper: _Stopper) -> None:
    """First SIGTERM/SIGINT: graceful stop (Connection.Close 320 to everyone); second: at once."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            stopper.request(f"{signal.Signals(signum).name} received")


async def _stop_when_supervisor_gone(link: WorkerLink, stopper: _Stopper) -> None:
    await link.wait_supervisor_gone()
    if not stopper.requested:
        # Killed with SIGKILL, say: nobody would restart or stop this worker any more.
        stopper.request("the supervisor is gone")


async def _stop_when_stdin_closes(stopper: _Stopper) -> None:
    """The parent holds our stdin pipe open while it lives; its end means the parent is gone
    (or closed it on purpose): stop gracefully, as on SIGTERM."""
    stream = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stream:
        try:
            while await stream.receive_some(4096):
                pass  # nothing is ever sent on it; read and forget
        except trio.BrokenResourceError:
            pass
    if not stopper.requested:
        stopper.request("standard input closed (the supervising process is gone)")


async def supervise(args: argparse.Namespace, config: GatewayConfig) -> int:
    """The ``--workers N`` parent: check the ports, then run and watch N workers."""
    if not reuse_port_supported():
        raise StartupError("--workers needs SO_REUSEPORT, which this system lacks")
    settings = server_settings(config)
    # Bad key material is reported once here rather than once per worker.
    authenticator_for(config)
    if settings.tls is not None:
        build_server_context(settings.tls)
    for listener in settings.listeners:
        if listener.unix:
            raise StartupError(f"{listener}: --workers cannot share a Unix socket listener")
        # Fail with one line here rather than once per worker: a bind without SO_REUSEPORT
        # is refused while anyone listens on the port, even a SO_REUSEPORT group.
        try:
            probes = await bind_tcp(listener.host, listener.port, reuse_port=False)
        except OSError as error:
            raise StartupError(f"cannot listen on {listener}: {error.strerror or error}") from None
        for probe in probes:
            probe.close()
    log.info("starting %d workers", args.workers)
    supervisor = Supervisor(
        args.workers,
        lambda index, fd: worker_command(
            sys.executable, config=args.config, log_level=args.log_level, index=index, fd=fd
        ),
    )
    async with trio.open_nursery() as nursery:
        if config.metricsListener is not None:
            # One endpoint for the fleet of workers: their metrics summed.
            summed = SupervisorMetrics(
                supervisor, Identity(node=config.node_name, cluster=config.amqpClusterName)
            )
            endpoint = MetricsServer(
                config.metricsListener.host,
                config.metricsListener.port,
                Endpoints(metrics=summed.metrics, readiness=summed.readiness),
            )
            try:
                await nursery.start(endpoint.serve)
            except OSError as error:
                raise StartupError(
                    f"cannot listen on metricsListener {config.metricsListener}: "
                    f"{error.strerror or error}"
                ) from None
        code = await supervisor.run()
        nursery.cancel_scope.cancel()
    log.info("stopped (exit code %d)", code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["permissions"]:
        # `starlight-rabbitmq permissions set|clear|list`: its own parser and exit codes.
        from gateway.auth.permissions_cli import run_permissions_command

        return run_permissions_command(arguments[1:])
    if arguments[:1] == ["vhosts"]:
        # `starlight-rabbitmq vhosts add|delete|list`: the Pulsar namespaces vhosts map to.
        from gateway.vhosts_cli import run_vhosts_command

        return run_vhosts_command(arguments[1:])
    if arguments[:1] == ["rollup"]:
        # `starlight-rabbitmq rollup`: the Spark job (extra [rollup]; docs/rollup.md).
        from gateway.rollup.cli import run_rollup_command

        return run_rollup_command(arguments[1:])
    args = parse_args(arguments)
    if args.worker_index is not None:
        role = f"worker-{args.worker_index}[%(process)d] "
    elif args.workers > 1:
        role = "supervisor[%(process)d] "
    else:
        role = ""  # a single process logs as it always did
    logging.basicConfig(
        level=args.log_level, format=f"%(asctime)s %(levelname)s {role}%(name)s: %(message)s"
    )
    # Libraries log each request or reconnect at INFO; one line per admin call drowns the
    # gateway's own connection log lines.
    for noisy in ("httpx", "httpcore", "kazoo"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"starlight-rabbitmq: configuration error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    open_remote = config.open_remote_listeners  # only when amqpAllowUnauthenticatedRemote
    if open_remote and args.worker_index is None:  # once, not once per worker
        log.warning(
            "AUTHENTICATION IS OFF on %s, which other machines can reach: anyone connects "
            "with any user name and password (amqpAllowUnauthenticatedRemote=true; set "
            "authenticationEnabled=true to require credentials, docs/security.md)",
            ", ".join(listener.url for listener in open_remote),
        )
    tune_collector()
    try:
        if args.worker_index is not None:
            link = WorkerLink(args.worker_index, args.worker_fd)
            try:
                trio.run(serve, config, link)
            finally:
                link.close()
        elif args.workers > 1:
            return trio.run(supervise, args, config)
        else:
            trio.run(partial(serve, config, stop_on_stdin_close=args.stop_on_stdin_close))
    except BaseException as error:
        startup = _startup_error(error)
        if startup is None:
            raise
        if isinstance(startup, ConfigError):
            # Key material (token keys, certificates) is only read once the gateway starts.
            print(f"starlight-rabbitmq: configuration error: {startup}", file=sys.stderr)
            return EXIT_CONFIG_ERROR
        print(f"starlight-rabbitmq: cannot start: {startup}", file=sys.stderr)
        return EXIT_STARTUP_ERROR
    return 0


def _startup_error(error: BaseException) -> StartupError | ConfigError | None:
    """The StartupError or ConfigError inside ``error``, which trio's nurseries wrap in
    exception groups."""
    if isinstance(error, StartupError | ConfigError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _startup_error(inner)
            if found is not None:
                return found
    return None


# Subcommands end the ordinary way (the rollup's Spark JVM is stopped by atexit handlers).
_FINALIZED_SUBCOMMANDS = tuple(SUBCOMMANDS)


def run() -> NoReturn:
    """The ``starlight-rabbitmq`` entry point: :func:`main`, then the exit.

    A gateway leaves without the interpreter's finalization: pulsar-client's C++ threads can
    still be joinable when finalization destroys the client after a clean close, which ends
    the process with "terminate called without an active exception" and SIGABRT, once in
    some tens of stops (apache/pulsar-client-python#256) -- a supervisor or a test would see
    a crash where there was none. By the time ``main`` returns everything is closed, so only
    the logs and standard streams need flushing first."""
    if sys.argv[1:2] and sys.argv[1] in _FINALIZED_SUBCOMMANDS:
        sys.exit(main())
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    # As the installed command (launcher.py) does: the allocator first, then ``run``.
    from gateway.allocator_choice import choose_allocator

    choose_allocator(sys.argv[1:])
    run()
