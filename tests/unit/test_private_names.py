"""No module of ``gateway/`` reads another module's private names (issue 35, item 4).

A leading underscore says "only this module uses it". ``other._name`` or ``from gateway.x
import _name`` in another module ties the two together behind their interfaces' backs: make
the name public where it is part of the owner's interface, or move the code to the module
that owns it.

What a module may touch: its own names (anything it defines: functions, classes, assignments,
attributes it sets on any object, ``__slots__`` entries; an object of a class of the same
module may read a fellow object's private state, as in ``__eq__``), and anything through
``self``, ``cls`` or ``super()``. ``gateway/metadata/kazoo_internals.py`` and
``gateway/pulsar/native_objects.py`` are exempt: reading kazoo's and pulsar-client's internals
is their one job. An access that must remain would be listed in ``REMAINING`` with why; none
does, and the test fails on any access.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATEWAY = REPO / "gateway"

# Third-party internals are their one job: kazoo's (issue 35: contract-tested in
# tests/unit/metadata/) and where pulsar-client keeps its binding's objects (tested in
# tests/unit/pulsar/test_native_objects.py).
EXEMPT_MODULES = frozenset(
    {"gateway/metadata/kazoo_internals.py", "gateway/pulsar/native_objects.py"}
)

# Underscored names that are public interfaces of the standard library: os._exit (the
# documented way out of a process without cleanup) and the namedtuple methods (underscored so
# as not to clash with field names).
PUBLIC_BY_CONVENTION = frozenset({"_exit", "_make", "_replace", "_asdict", "_fields"})

# (module, expression) -> how many times it occurs: the accesses allowed to remain, with why.
# None remain (issue 35, item 4): keep it so.
REMAINING: Counter[tuple[str, str]] = Counter()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_names(tree: ast.AST) -> set[str]:
    """Every name the module defines: what its own code may read, on any object."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries (and harmless other strings)
    return names


def _through_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
    )


def foreign_private_accesses(source: str) -> Iterator[tuple[int, str]]:
    """(line, expression) of each read of another module's private name in ``source``."""
    tree = ast.parse(source)
    own = own_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name):
                    yield (
                        node.lineno,
                        f"from {'.' * node.level}{node.module or ''} import {alias.name}",
                    )
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if _through_self(node.value) or node.attr in own:
                continue
            if node.attr in PUBLIC_BY_CONVENTION:
                continue
            yield node.lineno, ast.unparse(node)


def gateway_accesses() -> dict[str, list[tuple[int, str]]]:
    found: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(GATEWAY.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative in EXEMPT_MODULES:
            continue
        accesses = list(foreign_private_accesses(path.read_text(encoding="utf-8")))
        if accesses:
            found[relative] = accesses
    return found


def test_no_access_to_another_modules_private_names_beyond_the_remaining_ones() -> None:
    found = gateway_accesses()
    counted = Counter(
        (module, expression) for module, accesses in found.items() for _line, expression in accesses
    )
    beyond = {key for key, count in counted.items() if count > REMAINING[key]}
    lines = [
        f"{module}:{line}: {expression}"
        for module, accesses in found.items()
        for line, expression in accesses
        if (module, expression) in beyond
    ]
    assert not lines, (
        "another module's private names read (make them public or move the code):\n"
        + "\n".join(lines)
    )


def test_the_check_sees_each_kind_of_access() -> None:
    source = (
        "from gateway.x import _hidden\n"
        "import other\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._state = 1\n"
        "    def same(self, fellow):\n"
        "        return fellow._state + self._state + super()._base()\n"
        "    def reach(self):\n"
        "        return other._theirs, other.__doc__, other._make\n"
    )
    found = [expression for _line, expression in foreign_private_accesses(source)]
    assert found == ["from gateway.x import _hidden", "other._theirs"]
