#!/usr/bin/env python3
"""Print the configuration reference generated from gateway/config.py.

    .venv/bin/python scripts/config_table.py          # Markdown tables (README, docs)
    .venv/bin/python scripts/config_table.py --conf   # the example conf/gateway.conf

The README pastes the Markdown between ``<!-- config-table:start -->`` and
``<!-- config-table:end -->``; tests/unit/test_config.py fails when either output drifts.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Run from a checkout without relying on the editable install.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import render_example_conf, render_markdown_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--conf", action="store_true", help="print the example configuration file instead"
    )
    args = parser.parse_args(argv)
    sys.stdout.write(render_example_conf() if args.conf else render_markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
