"""A million fuzzed inputs through the sans-IO AMQP core (issue 17, item 7).

    .venv/bin/python bench/fuzz_core.py [--inputs 1000000] [--seed 0] [--out fuzz-failures]

Input number i is rebuilt from seed + i (tests/support/core_fuzzer.py says what is generated
and what is checked). Prints inputs/s, the histogram of how inputs ended (reply code and the
method that caused it) and the reply codes reached; every failing input is shrunk and saved to
``--out`` (hex bytes, split points, answer seed) and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.core_fuzzer import failure_of, make_case, minimise, run_case

MAX_SAVED = 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-failures"))
    parser.add_argument("--progress", type=int, default=100_000, help="print every N inputs")
    args = parser.parse_args()

    kinds: Counter[str] = Counter()
    codes: set[int] = set()
    failures: Counter[str] = Counter()
    saved = 0
    started = time.perf_counter()
    for number in range(args.seed, args.seed + args.inputs):
        case = make_case(number)
        try:
            outcome = run_case(case)
        except Exception as error:  # a finding: recorded, shrunk and saved, then go on
            message = f"{type(error).__name__}: {error}"
            failures[message[:100]] += 1
            if saved < MAX_SAVED:
                small = minimise(case, lambda c: failure_of(c) is not None)
                args.out.mkdir(parents=True, exist_ok=True)
                path = args.out / f"input-{number}.txt"
                path.write_text(f"# input {number}: {message}\n" + small.describe())
                print(f"FAIL input {number}: {message} (saved to {path})", flush=True)
                saved += 1
            continue
        kinds[outcome.kind] += 1
        codes |= outcome.codes
        done = number - args.seed + 1
        if args.progress and done % args.progress == 0:
            rate = done / (time.perf_counter() - started)
            print(f"{done:>9,} inputs  {rate:,.0f} inputs/s", flush=True)
    elapsed = time.perf_counter() - started

    print(f"\n{args.inputs:,} inputs in {elapsed:.1f} s: {args.inputs / elapsed:,.0f} inputs/s")
    print(f"failures: {sum(failures.values())}")
    for message, count in failures.most_common():
        print(f"  {count:>8}  {message}")
    print(f"\nreply codes reached ({len(codes)}): {', '.join(str(c) for c in sorted(codes))}")
    print(f"how inputs ended ({len(kinds)} kinds):")
    for kind, count in kinds.most_common():
        print(f"  {count:>9,}  {kind}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
