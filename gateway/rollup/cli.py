"""``starlight-rabbitmq rollup``: run the rollup job (local mode unless ``--master`` says)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from gateway.config import ConfigError, load_config

EXIT_CONFIG_ERROR = 2


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="starlight-rabbitmq rollup",
        description="Roll the gateways' usage events up into per-vhost throughput windows "
        "(Spark Structured Streaming; docs/rollup.md).",
    )
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="the gateway's configuration file: its broker-client keys and rollup* keys",
    )
    parser.add_argument(
        "--master",
        metavar="URL",
        help="Spark master: local[N], spark://host:7077, yarn, k8s://... "
        "(default: local[*], or what spark-submit was given)",
    )
    parser.add_argument(
        "--topic",
        metavar="TOPIC",
        help="the usage-events topic (default: usageEventsTopic of the configuration)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting (repeatable), e.g. --conf spark.ui.enabled=false",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    args = parser.parse_args(argv)
    for item in args.conf:
        if "=" not in item or not item.partition("=")[0].strip():
            parser.error(f"--conf {item!r}: expected KEY=VALUE")
    return args


def run_rollup_command(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # py4j logs every call between Python and Spark's JVM at INFO.
    logging.getLogger("py4j").setLevel(max(logging.WARNING, logging.getLogger().level))
    try:
        from gateway.rollup.settings import settings_from_config

        settings = settings_from_config(load_config(args.config), topic=args.topic)
    except ConfigError as error:
        print(f"starlight-rabbitmq rollup: configuration error: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except ImportError as error:
        print(
            f"starlight-rabbitmq rollup: {error}: install the rollup extra "
            "(pip install 'starlight-rabbitmq[rollup]')",
            file=sys.stderr,
        )
        return EXIT_CONFIG_ERROR
    from gateway.rollup.job import run

    conf = dict(item.partition("=")[::2] for item in args.conf)
    return run(settings, master=args.master, conf={k.strip(): v.strip() for k, v in conf.items()})
