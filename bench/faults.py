"""Issue 17 items 1, 3, 5 and 6 at full size: outages, memory bounds and connection storms,
figures printed.

    .venv/bin/python bench/faults.py            # ~6 min on 2 cores
    .venv/bin/python bench/faults.py --quick    # the sizes of `make test` (tests/faults)
    .venv/bin/python bench/faults.py --only outages     # or memory, storms

Needs the local stack up (``python3 scripts/stack.py up``); it is used as found, never stopped.
Each scenario runs against a fresh ``python -m gateway.cli`` process on a fresh Pulsar namespace
(tests/faults/gateway_process.py), the same scenarios as tests/faults, which assert on them:

1. a consumer with prefetch 10 that never acks while ``--messages`` x 10 KB are published with
   confirms (200 in flight): RSS after the first 200, its peak, and after;
2. a publisher without confirms, as fast as its socket takes bytes, nobody consuming: RSS,
   whether Connection.Blocked came, until every message is in the queue;
3. ``--bursts`` connections opened and closed 50 at a time while a pika client does publish+get
   round trips; ``--idle`` connections held (RSS delta / connections); ``--loris`` slow
   handshakes (one octet of the header every 0.2 s) and as many silent ones (handshake timeout
   2 s) during round trips; the open-files limit (256) reached, then freed;
4. the Pulsar broker (a standalone of our own on free ports, tests/support/own_stack.py) stopped
   under a publisher with confirms and a consumer for ``--outages`` seconds each (one past the
   producers' 30 s send timeout), and killed with SIGKILL for 5 s, then started again:
   confirms, nacks, closes, duplicates, the time from the broker up to the first new confirm;
5. one replica of two partitioned from Pulsar and ZooKeeper (tests/faults/partition.py) until
   its publisher had no confirm for ``--partition`` seconds, then healed.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.faults.gateway_process import gateway, open_amqp  # noqa: E402
from tests.faults.memory import fast_publisher, unacked_consumer  # noqa: E402
from tests.faults.outages import through_an_outage  # noqa: E402
from tests.faults.partition import partitioned_fleet, through_a_partition  # noqa: E402
from tests.faults.storms import KB, bursts, hold_idle, served_during, slow_loris  # noqa: E402
from tests.support.clients import connect, unique  # noqa: E402
from tests.support.own_stack import own_stack, pulsar_of  # noqa: E402


def _stack() -> Any:
    spec = importlib.util.spec_from_file_location(
        "starlight_local_stack", REPO / "scripts/stack.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["starlight_local_stack"] = module
    spec.loader.exec_module(module)
    if not module.is_up():
        sys.exit("the local stack is down: python3 scripts/stack.py up")
    return module.ENDPOINTS


def outages(stack: Any, path: Path, seconds: list[float], partition: float) -> None:
    print("== item 1: the Pulsar broker down and back")
    with (
        own_stack(path / "pulsar") as broker,
        gateway(pulsar_of(broker, metadata=stack), path) as process,
    ):
        for outage, how in [(length, "stopped") for length in seconds] + [(5.0, "killed")]:
            queue = unique("outage")
            connection = connect(process.port)
            connection.channel().queue_declare(queue, durable=True)
            connection.close()
            figures = through_an_outage(
                process.port,
                queue,
                stop=broker.down if how == "stopped" else broker.crash,
                start=broker.up,
                outage=outage,
                alive=process.alive,
            )
            print(f"{how}, publisher stalled {outage:g} s:", figures.describe())
    print("== item 3: a partitioned replica")
    with partitioned_fleet(path / "partition") as fleet:
        print(through_a_partition(fleet, stalled=partition).describe())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the sizes of make test")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--bursts", type=int, default=5_000)
    parser.add_argument("--idle", type=int, default=2_000)
    parser.add_argument("--loris", type=int, default=200)
    parser.add_argument("--outages", default="5,40", help="seconds of each broker outage")
    parser.add_argument("--partition", type=float, default=40.0)
    parser.add_argument("--only", choices=("memory", "storms", "outages"))
    args = parser.parse_args()
    if args.quick:
        args.messages, args.bursts, args.idle, args.loris = 5_000, 500, 300, 50
        args.outages, args.partition = "3", 3.0
    stack = _stack()
    with tempfile.TemporaryDirectory(prefix="faults-bench-") as directory:
        path = Path(directory)
        if args.only in (None, "memory"):
            print("== item 5: memory bounds")
            with gateway(stack, path) as process:
                print(
                    "stuck consumer (prefetch 10, never acks):",
                    unacked_consumer(process, args.messages).describe(),
                )
            with gateway(stack, path) as process:
                figures = fast_publisher(process, stack.web_url, args.messages)
                print(
                    "publisher without confirms:",
                    figures.describe(),
                    "; Connection.Blocked:",
                    figures.blocked or "none",
                )
        if args.only in (None, "storms"):
            print("== item 6: connection storms")
            with gateway(stack, path, extra="amqpHandshakeTimeoutMs=2000\n") as process:
                served_during(process.port, lambda: None)
                started = time.monotonic()
                opened, served = served_during(
                    process.port, lambda: bursts(process.port, args.bursts)
                )
                took = time.monotonic() - started
                print(
                    f"{opened} connections opened and closed in bursts of 50 in {took:.1f} s "
                    f"({opened / took:.0f}/s); meanwhile {served.round_trips} round trips, slowest "
                    f"{served.slowest * 1000:.0f} ms"
                )
                figures, held = hold_idle(process, args.idle)
                _, served = served_during(process.port, lambda: None)
                print(
                    figures.describe(),
                    f"; a round trip meanwhile took {served.slowest * 1000:.0f} ms",
                )
                for sock in held:
                    sock.close()
                loris, served = served_during(
                    process.port, lambda: slow_loris(process.port, args.loris, args.loris, 0.2, 2.0)
                )
                print(
                    f"slow-loris: {loris.slow_served}/{loris.slow} slow handshakes (1.6 s) served, "
                    f"{loris.silent_closed}/{loris.silent} silent ones hung up on; meanwhile "
                    f"{served.round_trips} round trips, slowest {served.slowest * 1000:.0f} ms"
                )
            with gateway(stack, path, nofile=256) as process:
                served_during(process.port, lambda: None)
                held = []
                while len(held) < 256:
                    try:
                        held.append(open_amqp(process.port, timeout=3.0))
                    except (TimeoutError, ConnectionError):
                        break
                process.wait_for(r"cannot accept connections", timeout=30)
                cpu = process.cpu_seconds()
                time.sleep(2.0)  # at the limit: what does the gateway burn?
                cpu = process.cpu_seconds() - cpu
                for sock in held[:20]:
                    sock.close()
                _, served = served_during(process.port, lambda: None)
                process.wait_for(r"accepting connections again", timeout=30)
                print(
                    f"open-files limit 256: {len(held)} clients accepted, then refused; CPU at the "
                    f"limit {cpu / 2 * 100:.0f} % of a core; "
                    f"{len(process.matching('cannot accept'))} log line(s):"
                )
                for line in process.output():
                    if "accept" in line and "gateway.server" in line:
                        print("   ", line)
                for sock in held[20:]:
                    sock.close()
            print(f"(KB = {KB} bytes)")
        if args.only in (None, "outages"):
            outages(stack, path, [float(x) for x in args.outages.split(",")], args.partition)


if __name__ == "__main__":
    main()
