"""No module of ``gateway/`` exceeds 800 lines (issue 35: "no module exceeds 800 lines").

A module that grows past it does more than one job: split it where the jobs part (and let
docs/architecture.md say where each went), rather than raising the limit.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATEWAY = REPO / "gateway"

MAX_LINES = 800


def line_count(path: Path) -> int:
    """Lines as ``wc -l`` counts them for a file ending in a newline."""
    return len(path.read_text(encoding="utf-8").splitlines())


def oversized_modules(limit: int = MAX_LINES) -> list[tuple[str, int]]:
    """(module relative to the repository, its length) of each module over ``limit`` lines."""
    found = []
    for path in sorted(GATEWAY.rglob("*.py")):
        length = line_count(path)
        if length > limit:
            found.append((path.relative_to(REPO).as_posix(), length))
    return found


def test_no_module_exceeds_the_limit() -> None:
    oversized = oversized_modules()
    assert not oversized, f"modules over {MAX_LINES} lines (split them by job):\n" + "\n".join(
        f"{module}: {length} lines" for module, length in oversized
    )


def test_the_check_sees_the_modules_and_their_length() -> None:
    everything = oversized_modules(limit=0)
    assert len(everything) == len(list(GATEWAY.rglob("*.py"))) > 100
    module, length = max(everything, key=lambda found: found[1])
    assert module.startswith("gateway/") and module.endswith(".py")
    assert length == (REPO / module).read_text(encoding="utf-8").count("\n")
