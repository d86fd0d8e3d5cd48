"""What the core install (``pip install durability-toolkit``, no extras) promises.

``.ci/run`` installs only the core into a fresh virtual environment and runs this file there
(with ``--noconftest``: the suite's fixtures need the extras), after the conformance suite on
memory and SQLite (``python -m durability.testing``). In the full environment the tests that
need an extra to be absent do not apply and say so.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import durability
from durability.errors import MissingExtra

#: Packages the core install must not bring (they come with extras).
EXTRA_PACKAGES = [
    "jupyterlab",
    "ipykernel",
    "ipywidgets",
    "matplotlib",
    "nbclient",
    "pandas",
    "psycopg",
    "redis",
    "starlette",
    "uvicorn",
]

CORE_ONLY = all(importlib.util.find_spec(name) is None for name in EXTRA_PACKAGES)
needs_core_only = pytest.mark.skipif(
    not CORE_ONLY, reason="the extras are installed here; .ci/run checks the core install alone"
)


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_durability_is_light() -> None:
    """`import durability` loads no heavy library, whichever extras are installed."""
    heavy = ["pandas", "matplotlib", "ipywidgets", "sqlalchemy", "redis", "httpx", "numpy"]
    loaded = _run(
        f"import sys, durability; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    assert loaded == "", f"import durability loaded: {loaded}"


@needs_core_only
def test_the_core_install_brings_no_extra() -> None:
    """No Jupyter, pandas, matplotlib, Postgres, Redis or server package comes with the core."""
    found = [name for name in EXTRA_PACKAGES if importlib.util.find_spec(name) is not None]
    assert found == []


def test_the_embedded_default_works(tmp_path: Path) -> None:
    """A checkpointing worker's path on SQLite: put, read back, list, sweep's plan."""
    from durability import Checkpoint
    from durability.sweep import plan_sweep

    with durability.open(f"sqlite:///{tmp_path / 'core.db'}") as store:
        stored = store.put(Checkpoint(thread_id="t", node_id="n", state={"items": [1, 2]}))
        assert store.latest("t") == stored
        assert [r.thread_id for r in store.iter_threads()] == ["t"]
        assert [row.thread_id for row in plan_sweep(store).rows] == ["t"]


def test_the_cli_answers_help() -> None:
    """`durability --help` and `durability demo --help` work without any extra."""
    for args in (["--help"], ["demo", "--help"], ["sweep", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "durability", *args], capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert "Usage:" in out.stdout


@needs_core_only
@pytest.mark.parametrize(
    ("url", "extra"),
    [("postgresql://u@127.0.0.1/db", "postgres"), ("redis://127.0.0.1:6379/0", "redis")],
)
def test_a_store_whose_extra_is_missing_names_it(url: str, extra: str) -> None:
    """Opening a Postgres or Redis store without its extra says which extra to install."""
    with pytest.raises(MissingExtra, match=rf"durability-toolkit\[{extra}\]"):
        durability.open(url)


@needs_core_only
@pytest.mark.parametrize("module", ["frames", "analyses", "plots", "widgets"])
def test_the_analysis_without_its_extra_names_it(module: str) -> None:
    """The frames, analyses, charts and widgets need the notebook extra, and say so."""
    with pytest.raises(MissingExtra, match=r"durability-toolkit\[notebook\]"):
        importlib.import_module(f"durability.{module}")


@needs_core_only
def test_a_command_whose_extra_is_missing_names_it() -> None:
    """`durability plane serve` without the plane extra fails naming it, not with a traceback."""
    out = subprocess.run(
        [sys.executable, "-m", "durability", "plane", "serve", "--help"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, "help needs no extra"
    out = subprocess.run(
        [sys.executable, "-m", "durability", "serve-ops", "memory://x"],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "durability-toolkit[plane]" in out.stderr
    assert "Traceback" not in out.stderr
