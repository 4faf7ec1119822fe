"""The roles of gateway/metadata/roles.py, one by one: both stores implement each with the
role's own signatures (names, kinds and defaults of the parameters; a coroutine where the role
has one), and each has a contract module of its own (``ROLE`` in test_contract_<role>.py).
mypy checks the types where a store is handed out as a ``MetadataStore``; this checks what a
store is at run time, the ZooKeeper store's methods served by its parts included."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest

from gateway.metadata import roles
from gateway.metadata.store import MetadataStore
from tests.integration.metadata.conftest import Fleet

ROLES = [
    member
    for member in vars(roles).values()
    if inspect.isclass(member) and member.__module__ == roles.__name__
]


def members(role: type) -> dict[str, Any]:
    return {name: value for name, value in vars(role).items() if not name.startswith("_")}


def shape(signature: inspect.Signature) -> list[tuple[str, Any, Any]]:
    """What a caller relies on: each parameter's name, kind and default (not ``self``)."""
    return [(p.name, p.kind, p.default) for p in signature.parameters.values() if p.name != "self"]


def test_the_roles_make_up_the_store() -> None:
    assert len(ROLES) == 9
    assert set(MetadataStore.__mro__) >= set(ROLES)
    names = [name for role in ROLES for name in members(role)]
    assert len(names) == len(set(names))  # no method in two roles


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.__name__)
async def test_the_store_implements_the_role(fleet: Fleet, role: type) -> None:
    store = await fleet.replica()
    for name, declared in members(role).items():
        if isinstance(declared, property):
            assert isinstance(getattr(type(store), name), property), name
            continue
        implemented = getattr(store, name)
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), (
            name
        )
        assert shape(inspect.signature(implemented)) == shape(inspect.signature(declared)), name


def test_every_role_has_its_contract() -> None:
    tested = set()
    for path in Path(__file__).parent.glob("test_contract_*.py"):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        if hasattr(module, "ROLE"):
            tested.add(module.ROLE)
    assert tested == set(ROLES)
