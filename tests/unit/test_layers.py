"""The layering of docs/architecture.md, checked on the import graph of ``gateway/``.

The rules are read from one place: the table of docs/architecture.md ("The layers, innermost
first"). Each row names its layers (a package ``gateway/<name>/`` or a module ``<name>.py``),
the layers of ``gateway/`` it may import (backticked names, or "everything") and the libraries
it must not import (backticked names, or "I/O libraries": the list under the table). Every
layer of ``gateway/`` has exactly one row.

Every ``import`` and ``from … import`` statement is read from the source (including those
inside functions and under ``TYPE_CHECKING``), so a forbidden import cannot hide behind a lazy
one, and no two modules of ``gateway/`` may import each other, directly or around a circle.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GATEWAY = REPO / "gateway"
ARCHITECTURE = REPO / "docs" / "architecture.md"
TABLE_HEADING = "## The layers, innermost first"
EVERYTHING = "everything"


# ---------------------------------------------------------------------------------------------
# Reading the imports


def imports(source: str, package: str = "gateway") -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, a module of ``package``.

    ``from a import b`` yields ``a.b`` when that is a module of ``gateway/``, else ``a`` (``b``
    is a name ``a`` defines): ``from gateway import bounded`` imports the module
    gateway.bounded, and read as plain "gateway" it would pass every rule.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:
                member = f"{base}.{alias.name}"
                yield node.lineno, member if _is_gateway_module(member) else base


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _is_gateway_module(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "gateway":
        return False
    path = GATEWAY.parent.joinpath(*parts)
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(GATEWAY.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def gateway_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(GATEWAY.rglob("*.py"))}


def module_imports(name: str, path: Path) -> list[tuple[int, str]]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return list(imports(path.read_text(encoding="utf-8"), package))


def layer_of(module: str) -> str | None:
    """``gateway.amqp.codec`` → ``amqp``; ``gateway.app`` → ``app``; ``gateway`` (the package
    itself: its version) → ``""``; None outside the gateway."""
    parts = module.split(".")
    if parts[0] != "gateway":
        return None
    return parts[1] if len(parts) > 1 else ""


def top(module: str) -> str:
    return module.split(".")[0]


def test_the_reader_sees_imports_inside_functions_too() -> None:
    source = "import os\nfrom a.b import c\ndef f():\n    import trio\n"
    assert [module for _line, module in imports(source)] == ["os", "a.b", "trio"]


def test_the_reader_sees_modules_imported_from_the_gateway_package() -> None:
    source = "from gateway import bounded, __version__\nimport gateway.native_build as nb\n"
    assert [module for _line, module in imports(source)] == [
        "gateway.bounded",
        "gateway",
        "gateway.native_build",
    ]


def test_the_reader_resolves_relative_imports() -> None:
    source = "from .codec import decode_method\nfrom . import events\nfrom ..model import vhost\n"
    assert [module for _line, module in imports(source, "gateway.amqp")] == [
        "gateway.amqp.codec",
        "gateway.amqp.events",
        "gateway.model.vhost",
    ]


# ---------------------------------------------------------------------------------------------
# The rules: docs/architecture.md's table


@dataclass(frozen=True)
class Rule:
    layers: tuple[str, ...]
    may_import: frozenset[str] | None  # layers of gateway/; None: everything
    must_not_import: frozenset[str]  # libraries (top-level names)


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _layer(name: str) -> str:
    """``gateway/amqp/`` → ``amqp``; ``app.py`` → ``app``."""
    return name.removeprefix("gateway/").removesuffix("/").removesuffix(".py")


def read_rules(text: str) -> list[Rule]:
    section = text.split(TABLE_HEADING, 1)[1]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(_cells(line))
    header, rows = table[0], table[2:]
    assert header[2:] == ["may import of `gateway/`", "libraries it must not import"], header
    io_line = next(line for line in lines if line.startswith("**I/O libraries**"))
    io_libraries = frozenset(_ticked(io_line))
    rules = []
    for layers, _job, may, must_not in rows:
        may_import = None if may == EVERYTHING else frozenset(map(_layer, _ticked(may)))
        libraries = set(_ticked(must_not))
        if "I/O libraries" in must_not:
            libraries |= io_libraries
        rules.append(Rule(tuple(map(_layer, _ticked(layers))), may_import, frozenset(libraries)))
    return rules


RULES = read_rules(ARCHITECTURE.read_text(encoding="utf-8"))


def gateway_layers() -> set[str]:
    """The layers of ``gateway/``: its packages and its top-level modules."""
    return {
        path.stem if path.is_file() else path.name
        for path in GATEWAY.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__") or (path / "__init__.py").is_file()
    }


def test_the_table_is_read() -> None:
    amqp = next(rule for rule in RULES if rule.layers == ("amqp",))
    assert amqp.may_import == frozenset({"bounded", "native_build"})
    assert {"trio", "pulsar", "kazoo", "socket"} <= amqp.must_not_import
    assert any(rule.may_import is None for rule in RULES)


def test_every_layer_of_the_gateway_has_exactly_one_row() -> None:
    named = [layer for rule in RULES for layer in rule.layers]
    assert sorted(named) == sorted(set(named)), "a layer in two rows"
    assert set(named) == gateway_layers()
    mentioned = {layer for rule in RULES for layer in rule.may_import or ()}
    assert mentioned <= gateway_layers(), "the table allows a layer that does not exist"


def violations() -> list[str]:
    rule_of = {layer: rule for rule in RULES for layer in rule.layers}
    found = []
    for name, path in gateway_modules().items():
        layer = layer_of(name)
        assert layer is not None
        # gateway/__init__.py (the version) is no layer: it imports nothing of the gateway.
        rule = rule_of.get(layer, Rule((), frozenset(), frozenset()))
        for line, module in module_imports(name, path):
            where = f"{path.relative_to(REPO)}:{line}"
            target = layer_of(module)
            if target is None:
                if top(module) in rule.must_not_import:
                    found.append(f"{where}: {layer} imports {module}")
            elif target not in ("", layer) and target not in (rule.may_import or {target}):
                found.append(f"{where}: {layer} imports {module}")
    return sorted(set(found))


def test_every_layer_imports_only_what_its_row_allows() -> None:
    assert violations() == []


def test_no_pamqp_import_outside_gateway_amqp() -> None:
    """Not in server/, backend/, auth/, model/…: they all speak the typed commands."""
    outside = [
        (name, module)
        for name, path in gateway_modules().items()
        for _line, module in module_imports(name, path)
        if top(module) == "pamqp" and layer_of(name) != "amqp"
    ]
    assert outside == []
    # The check is not vacuous: the core does use pamqp.
    assert any(
        top(module) == "pamqp"
        for name, path in gateway_modules().items()
        if layer_of(name) == "amqp"
        for _line, module in module_imports(name, path)
    )


# ---------------------------------------------------------------------------------------------
# No import circles


def import_graph() -> dict[str, set[str]]:
    """Module → the modules of ``gateway/`` it imports (itself left out)."""
    modules = gateway_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for _line, module in module_imports(name, path):
            # ``import gateway.a.b.C`` or a name from a module: the longest module prefix.
            parts = module.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts and ".".join(parts) != name:
                targets.add(".".join(parts))
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_no_two_gateway_modules_import_each_other_even_around_a_circle() -> None:
    assert circles(import_graph()) == []
