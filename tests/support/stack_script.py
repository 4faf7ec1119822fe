"""scripts/stack.py (the local Pulsar + ZooKeeper stack, docs/local-stack.md) and
scripts/stack_cluster.py (its multi-broker profile) as modules.

scripts/ is not a package (stack.py must run with a bare python3), so it is imported by path,
once per process.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_DIR = Path(__file__).resolve().parents[2]
CLUSTER_MODULE = "starlight_local_stack_cluster"


def load_stack_module() -> ModuleType:
    name = "starlight_local_stack"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_DIR / "scripts" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def load_cluster_module() -> ModuleType:
    """scripts/stack_cluster.py, imported by path (scripts/ is no package). It imports
    ``stack``: the module the test session already loaded (tests/conftest.py), not a copy."""
    if CLUSTER_MODULE in sys.modules:
        return sys.modules[CLUSTER_MODULE]
    sys.modules.setdefault("stack", load_stack_module())
    spec = importlib.util.spec_from_file_location(
        CLUSTER_MODULE, REPO_DIR / "scripts" / "stack_cluster.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[CLUSTER_MODULE] = module  # dataclasses look their module up while built
    spec.loader.exec_module(module)
    return module
