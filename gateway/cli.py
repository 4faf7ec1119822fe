"""The ``starlight-rabbitmq`` command: read the configuration, serve until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Sequence

import trio

from gateway import __version__
from gateway.app import pulsar_backend, server_settings
from gateway.auth.authenticator import AcceptAnyone
from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.server.server import GatewayServer, StartupError

log = logging.getLogger("gateway")

EXIT_CONFIG_ERROR = 2
EXIT_STARTUP_ERROR = 1


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="starlight-rabbitmq",
        description="An AMQP 0-9-1 gateway that runs RabbitMQ applications on Apache Pulsar.",
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
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser.parse_args(argv)


async def serve(config: GatewayConfig) -> None:
    settings = server_settings(config)
    async with pulsar_backend(config) as backend:
        server = GatewayServer(settings, AcceptAnyone(), backend)
        # Bind before serving, so that a taken port is a one-line error, not a traceback.
        await server.bind()
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            nursery.start_soon(_stop_on_signals, server, nursery.cancel_scope)
            await server.stopped.wait()
            nursery.cancel_scope.cancel()


async def _stop_on_signals(server: GatewayServer, scope: trio.CancelScope) -> None:
    """First SIGTERM/SIGINT: graceful stop (Connection.Close 320 to everyone); second: at once."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            if server.stop_requested:
                log.warning("second %s: stopping at once", name)
                scope.cancel()
                return
            log.info("%s received: shutting down", name)
            server.request_stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
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
    try:
        trio.run(serve, config)
    except BaseException as error:
        startup = _startup_error(error)
        if startup is None:
            raise
        print(f"starlight-rabbitmq: cannot start: {startup}", file=sys.stderr)
        return EXIT_STARTUP_ERROR
    return 0


def _startup_error(error: BaseException) -> StartupError | None:
    """The StartupError inside ``error``, which trio's nurseries wrap in exception groups."""
    if isinstance(error, StartupError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _startup_error(inner)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    sys.exit(main())
