"""The package's promises about itself: light import, a complete API, matching environments."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

import durability
from durability import bundle
from durability.cli import cli
from durability.errors import NotebookError

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ["pandas", "matplotlib", "ipywidgets", "sqlalchemy", "redis", "httpx", "numpy", "starlette"]

#: conda-forge names that differ from the package index names.
CONDA_TO_PIP = {"prometheus_client": "prometheus-client", "redis-py": "redis"}


def test_public_names_are_sorted_and_exist() -> None:
    """__all__ is sorted and every name in it exists."""
    assert durability.__all__ == sorted(durability.__all__)
    for name in durability.__all__:
        assert hasattr(durability, name), name


def test_distribution_is_not_named_durability() -> None:
    """An unrelated project owns `durability` on the package index."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] != "durability"


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _extra(project: dict[str, Any], extra: str) -> set[str]:
    """The package names an extra installs, following the extras it names of this project."""
    names: set[str] = set()
    for requirement in project["optional-dependencies"][extra]:
        name = _name(requirement)
        if name == project["name"]:
            for nested in re.findall(r"\[([^\]]*)\]", requirement)[0].split(","):
                names |= _extra(project, nested.strip())
        else:
            names.add(name)
    return names


def test_environment_yml_lists_the_same_packages_as_pyproject() -> None:
    """environment.yml creates the same environment as the core and the dev extra (which
    includes all the others and the docs)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]} | _extra(project, "dev")
    assert _extra(project, "all") <= wanted, "the dev extra must include every other extra"
    assert _extra(project, "docs") <= wanted, "the dev extra must include the docs extra"
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names: list[str] = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            names += [_name(p) for p in dep["pip"] if not p.startswith("-e")]
        else:
            name = _name(dep)
            if name not in ("python", "pip"):
                names.append(_name(CONDA_TO_PIP.get(name, name)))
    listed = set(names)
    assert len(names) == len(listed), (
        f"listed twice: {sorted({n for n in names if names.count(n) > 1})}"
    )
    assert listed == wanted, (
        f"only in environment.yml: {listed - wanted}; only in pyproject: {wanted - listed}"
    )


# ---------------------------------------------------------------------------- notebooks in the wheel


def test_the_wheel_ships_the_notebooks_and_an_installed_copy_finds_them(tmp_path: Path) -> None:
    """The wheel holds the top-level notebooks/ as durability/notebooks/*.ipynb, and the bundle
    imported from the unpacked wheel (not the checkout) finds them there."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("*.whl")
    site = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel) as zf:
        shipped = {name for name in zf.namelist() if name.endswith(".ipynb")}
        zf.extractall(site)
    assert shipped == {f"durability/notebooks/{name}" for name in bundle.NOTEBOOK_NAMES}
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r}); import json, durability; "
        "from durability import bundle; print(json.dumps([durability.__file__, "
        "str(bundle.NOTEBOOKS), [str(bundle.notebook(n)) for n in bundle.NOTEBOOK_NAMES], "
        "bundle.source_root()]))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    module, folder, found, source = json.loads(out.stdout)
    assert Path(module).is_relative_to(site)
    assert Path(folder) == site / "durability" / "notebooks"
    assert [Path(p).name for p in found] == list(bundle.NOTEBOOK_NAMES)
    assert source is None


def test_a_missing_notebook_is_a_notebook_error_and_the_demo_stops_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An install without its notebooks fails with NotebookError naming the folder, not with
    FileNotFoundError; `durability demo` says so in one line before it builds anything."""
    empty = tmp_path / "no-notebooks"
    empty.mkdir()
    with pytest.raises(NotebookError, match=r"cannot find the notebook explore_store\.ipynb"):
        bundle.notebook("explore_store.ipynb", empty)
    with pytest.raises(NotebookError, match="installed without its notebooks"):
        bundle.execute(empty / "plan_retention.ipynb", {}, tmp_path / "executed")
    monkeypatch.setattr(bundle, "NOTEBOOKS", empty)
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "cannot find the notebook explore_store.ipynb" in result.output
    assert not (tmp_path / "out").exists()
