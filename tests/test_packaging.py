"""The package's promises about itself: light import, a complete API, matching environments."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

import durability

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ["pandas", "matplotlib", "ipywidgets", "sqlalchemy", "redis", "httpx", "numpy", "starlette"]

#: conda-forge names that differ from the package index names.
CONDA_TO_PIP = {"prometheus_client": "prometheus-client", "redis-py": "redis"}


def test_import_durability_is_light() -> None:
    """`import durability` loads none of the heavy libraries."""
    code = f"import sys, durability; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import durability loaded: {out.stdout.strip()}"


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


def test_environment_yml_lists_the_same_packages_as_pyproject() -> None:
    """environment.yml creates the same environment as the core, dev and langgraph extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"]}
    for extra in ("dev", "langgraph"):
        wanted |= {_name(r) for r in project["optional-dependencies"][extra]}
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
