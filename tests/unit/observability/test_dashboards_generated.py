"""dashboards/*.json are what scripts/dashboards.py generates (edit the script, not the JSON)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_dashboards_are_generated() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "dashboards.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
