"""``python -m gateway.rollup`` and ``spark-submit .../gateway/rollup/__main__.py``: the same
as ``starlight-rabbitmq rollup`` (the ``gateway`` package must be installed where it runs)."""

import sys

from gateway.rollup.cli import run_rollup_command

if __name__ == "__main__":
    sys.exit(run_rollup_command(sys.argv[1:]))
