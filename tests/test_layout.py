"""The folder tree shows the layers (docs/about.md, "Where things are"): the public modules
import from where they always did, and every private module lives in its layer's folder."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "python" / "ddbtx"

#: Every module a user imports by name, with a name it must still give.
PUBLIC = {
    "ddbtx": "TransactionManager",
    "ddbtx.transaction": "Transaction",
    "ddbtx.manager": "TransactionManager",
    "ddbtx.errors": "DdbtxError",
    "ddbtx.schema": "ATTR_LOCK",
    "ddbtx.tables": "create_data_table",
    "ddbtx.guard": "guard",
    "ddbtx.locks": "Mutex",
    "ddbtx.locks.admin": "list_locks",
    "ddbtx.aio": "TransactionManager",
    "ddbtx.aio.locks": "Mutex",
    "ddbtx.streams": "committed_changes",
    "ddbtx.streams_lambda": "handler",
    "ddbtx.stream_reader": "StreamReader",
    "ddbtx.sweeper": "Sweeper",
    "ddbtx.recovery": "recover",
    "ddbtx.instrumentation": "count_requests",
    "ddbtx.chaos": "Chaos",
    "ddbtx.local": "LocalDynamo",
    "ddbtx.cli": "main",
    "ddbtx.demo": "make_plan",
}


@pytest.mark.parametrize(("module", "name"), sorted(PUBLIC.items()))
def test_given_a_public_module_then_it_imports_as_before(module: str, name: str) -> None:
    # When a user imports it by its documented name
    imported = importlib.import_module(module)

    # Then it gives the name it always gave
    assert hasattr(imported, name), f"{module} has no {name}"


def test_given_the_sync_and_public_names_then_they_are_one_class() -> None:
    # Given the names a user may reach one class by
    import ddbtx
    import ddbtx.manager
    import ddbtx.transaction

    # Then they are the same objects, wherever they are defined
    assert ddbtx.Transaction is ddbtx.transaction.Transaction
    assert ddbtx.TransactionManager is ddbtx.transaction.TransactionManager
    assert ddbtx.TransactionManager is ddbtx.manager.TransactionManager
    assert ddbtx.Transaction.__module__ == "ddbtx._coordinator.transaction"


def test_given_the_flat_folder_then_it_holds_only_public_modules() -> None:
    # Given the modules directly in the package's folder
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))

    # Then none is private: private modules live in their layer's subpackage
    assert [name for name in flat if name.startswith("_") and name != "__init__.py"] == []


def test_given_the_layers_contract_then_each_private_layer_is_one_subpackage() -> None:
    # Given the layers the import contract names
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["id"] == "layers")["layers"]
    named = {name.strip() for layer in layers for name in layer.split(":")}

    # Then every private subpackage is a layer's, and every name is a folder or module on disk
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert {"_base", "_stores", "_item_steps", "_coordinator", "_janitors", "_cli"} <= named
    assert named == subpackages | modules
    # And the private subpackages hold no further underscored modules of their own
    for sub in sorted(p for p in subpackages if p.startswith("_")):
        inner = [p.name for p in (PACKAGE / sub).glob("_*.py") if p.name != "__init__.py"]
        assert inner == [], f"{sub}: {inner}"
