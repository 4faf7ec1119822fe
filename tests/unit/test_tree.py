"""tests/unit mirrors gateway/ (docs/architecture.md, "Tests"), checked on the file tree.

``tests/unit/<path>/test_<m>.py`` tests ``gateway/<path>/<m>.py`` (or the package
``gateway/<path>/<m>/``). A module with several test files gets a directory named after it:
``tests/unit/<path>/<m>/test_<aspect>.py`` tests ``gateway/<path>/<m>.py``. Anything else is listed
below with the reason it belongs to no single module.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "tests" / "unit"
GATEWAY = REPO / "gateway"

# Unit test files that test no single module of gateway/, and why.
NOT_ONE_MODULE = {
    "test_layers.py": "the import graph of the whole gateway/ package",
    "test_private_names.py": "every module of gateway/: no reads of another module's private names",
    "test_test_layout.py": "the imports of tests/ itself: no test module imports another",
    "test_module_size.py": "every module of gateway/: none over 800 lines",
    "test_tree.py": "this file: the layout of tests/unit itself",
    "test_extension_shim.py": "the Java proxy extension (extension_shim/) against the Python side",
    "amqp/test_fuzz.py": "Hypothesis fuzzing across every decoder of gateway/amqp at once",
    "observability/test_dashboards_generated.py": "dashboards/*.json against scripts/dashboards.py",
    "test_stack_cluster.py": "scripts/stack_cluster.py, the local stack's multi-broker profile",
}


def mirrored_module(test_file: Path) -> Path | None:
    """The gateway module a unit test file mirrors, or None if its path names none."""
    relative = test_file.relative_to(UNIT)
    folder = relative.parent
    module = relative.stem.removeprefix("test_")
    for candidate in (
        GATEWAY / folder / f"{module}.py",
        GATEWAY / folder / module / "__init__.py",
        # tests/unit/<path>/<m>/test_<aspect>.py: one of several files for gateway/<path>/<m>.py
        (GATEWAY / folder).with_suffix(".py") if folder.parts else None,
    ):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def unit_test_files() -> list[Path]:
    return sorted(UNIT.rglob("test_*.py"))


def test_the_rule_sees_the_unit_tests() -> None:
    assert len(unit_test_files()) > 50
    assert mirrored_module(UNIT / "amqp" / "test_codec.py") == GATEWAY / "amqp" / "codec.py"
    assert mirrored_module(UNIT / "amqp" / "connection" / "test_splitting.py") == (
        GATEWAY / "amqp" / "connection.py"
    )
    assert mirrored_module(UNIT / "amqp" / "test_nothing_by_this_name.py") is None


def test_every_unit_test_file_mirrors_a_module_or_says_why_not() -> None:
    relative = {path.relative_to(UNIT).as_posix(): path for path in unit_test_files()}
    unmirrored = sorted(
        name
        for name, path in relative.items()
        if mirrored_module(path) is None and name not in NOT_ONE_MODULE
    )
    assert not unmirrored, (
        f"these name no module of gateway/: {unmirrored}; rename each to "
        "tests/unit/<package>/test_<module>.py, or list it in NOT_ONE_MODULE with a reason"
    )
    needlessly_listed = sorted(
        name for name in NOT_ONE_MODULE if name in relative and mirrored_module(relative[name])
    )
    assert not needlessly_listed, f"these mirror a module, unlist them: {needlessly_listed}"


def test_the_exceptions_still_exist() -> None:
    missing = [name for name in NOT_ONE_MODULE if not (UNIT / name).is_file()]
    assert not missing, f"listed in NOT_ONE_MODULE but gone: {missing}"
