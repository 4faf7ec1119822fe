"""The layering of docs/architecture.md, checked on the import graph of ``gateway/``.

Every ``import`` and ``from … import`` statement is read from the source (including those
inside functions), so a forbidden import cannot hide behind a lazy one.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"

# Libraries that do I/O or run threads: the protocol core and the model use none of them.
IO_LIBRARIES = frozenset(
    {
        "asyncio",
        "httpx",
        "kazoo",
        "outcome",
        "pulsar",
        "_pulsar",
        "selectors",
        "socket",
        "ssl",
        "subprocess",
        "threading",
        "trio",
    }
)


def imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "gateway":
                # ``from gateway import bounded`` imports the module gateway.bounded: read
                # as plain "gateway", it would pass every layer's rule.
                for alias in node.names:
                    yield node.lineno, _gateway_member(alias.name)
            else:
                yield node.lineno, node.module


def _gateway_member(name: str) -> str:
    """``gateway.<name>`` for a module or package of gateway/, else ``gateway`` (a name the
    package itself defines, such as ``__version__``)."""
    is_module = (GATEWAY / f"{name}.py").is_file() or (GATEWAY / name).is_dir()
    return f"gateway.{name}" if is_module else "gateway"


def package_imports(package: str) -> list[tuple[str, str]]:
    """(``path:line``, module) for every import of the modules under ``gateway/<package>``
    (``""``: all of ``gateway/``)."""
    found = []
    for path in sorted((GATEWAY / package).rglob("*.py")):
        for line, module in imports(path.read_text(encoding="utf-8")):
            found.append((f"{path.relative_to(GATEWAY.parent)}:{line}", module))
    return found


def top(module: str) -> str:
    return module.split(".")[0]


def gateway_package(module: str) -> str | None:
    """``gateway.amqp.codec`` → ``gateway.amqp``; None outside the gateway."""
    parts = module.split(".")
    if parts[0] != "gateway":
        return None
    return ".".join(parts[:2])


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


# Besides itself: the package's version, the bounded cache helper, and the loader of the
# compiled frame scan (stdlib only; it reads the built module once per process).
AMQP_MAY_IMPORT = (None, "gateway", "gateway.amqp", "gateway.bounded", "gateway.native_build")


def test_the_amqp_core_does_no_io_and_imports_no_other_layer() -> None:
    bad = [
        (where, module)
        for where, module in package_imports("amqp")
        if top(module) in IO_LIBRARIES or gateway_package(module) not in AMQP_MAY_IMPORT
    ]
    assert bad == []


def test_the_model_is_pure() -> None:
    bad = [
        (where, module)
        for where, module in package_imports("model")
        if top(module) in IO_LIBRARIES
        or top(module) == "pamqp"
        or gateway_package(module) not in (None, "gateway.amqp", "gateway.model")
    ]
    assert bad == []


def test_no_pamqp_import_outside_gateway_amqp() -> None:
    """Not in server/, backend/, auth/, model/…: they all speak the typed commands."""
    outside = [
        (where, module)
        for where, module in package_imports("")
        if top(module) == "pamqp" and not where.startswith("gateway/amqp/")
    ]
    assert outside == []
    # The check is not vacuous: the core does use pamqp.
    assert any(top(m) == "pamqp" for _w, m in package_imports("amqp"))
