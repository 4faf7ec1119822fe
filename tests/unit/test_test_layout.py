"""No module of ``tests/`` imports from a test module (issue 35, item 4).

A helper two test modules share lives in ``tests/support/`` (one job per module), or, for a
fixture, in a ``conftest.py``. Importing it from another ``test_*`` module ties the two
together: pytest collects the imported module's tests and fixtures a second time under the
importer's name, and a change to one test module breaks another.

Every ``import`` and ``from … import`` is read from the source (relative ones resolved, those
inside functions included). An import that must remain would be listed in ``REMAINING``
with why; none does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"

# (importing module, imported test module): the imports allowed to remain, with why. None
# remain (issue 35, item 4): keep it so.
REMAINING: frozenset[tuple[str, str]] = frozenset()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = REPO.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, a module of ``package``:
    for ``from a import b``, ``a.b`` when that is a module, else ``a``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                member = f"{base}.{alias.name}"
                yield node.lineno, member if _is_module(member) else base


def is_test_module(name: str) -> bool:
    return name.rpartition(".")[2].startswith("test_")


def imports_of_test_modules() -> list[tuple[str, int, str]]:
    """(importing file, line, imported test module) across ``tests/``."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        name = module_name(path)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        relative = path.relative_to(REPO).as_posix()
        for line, imported in imported_modules(path.read_text(encoding="utf-8"), package):
            if is_test_module(imported) and imported != name:
                found.append((relative, line, imported))
    return found


def test_no_module_imports_a_test_module_beyond_the_remaining_ones() -> None:
    unexpected = [
        f"{relative}:{line}: imports {imported}"
        for relative, line, imported in imports_of_test_modules()
        if (relative, imported) not in REMAINING
    ]
    assert not unexpected, (
        "move the shared helpers to tests/support/ (fixtures to a conftest.py):\n"
        + "\n".join(unexpected)
    )


def test_the_check_sees_absolute_relative_and_module_imports() -> None:
    source = (
        "from tests.integration.clients.test_ttl import wait_count\n"
        "from .test_dead_lettering import get\n"
        "from tests.integration.clients import test_queues\n"
        "import tests.integration.test_cli\n"
        "from tests.support.clients import connect\n"
        "from tests.integration.clients.conftest import Running\n"
    )
    imported = [
        name
        for _line, name in imported_modules(source, "tests.integration.clients")
        if is_test_module(name)
    ]
    assert imported == [
        "tests.integration.clients.test_ttl",
        "tests.integration.clients.test_dead_lettering",
        "tests.integration.clients.test_queues",
        "tests.integration.test_cli",
    ]
