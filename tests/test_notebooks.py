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
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import pytest
from conftest import make_target

import durability
from durability import bundle, replication
from durability.clock import FrozenClock
from durability.demo import DEMO_DAYS, KEY_ENV, build_demo, build_fleet, edge_runs
from durability.errors import ConfigError
from durability.settings import Settings
from durability.sweep import plan_sweep

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
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


# ---------------------------------------------------------------------------- execution

END = datetime(2026, 12, 1, 12, tzinfo=UTC)
NOW = END.isoformat()


def _text(nb: Any) -> str:
    """Every text a reader sees in the executed notebook (streams and plain-text results)."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                parts.append(output.text)
            elif output.output_type in ("execute_result", "display_data"):
                parts.append(output.data.get("text/plain", ""))
    return "\n".join(parts)


def _pngs(nb: Any) -> int:
    return sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def _all_ran(nb: Any) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.execution_count is not None, cell.source[:80]
            assert not [o for o in cell.outputs if o.output_type == "error"], cell.source[:80]


@dataclass
class Fleet:
    """A demo fleet on one provider: its store, the replacement of a lost edge store, a plane."""

    store_url: str
    edge_url: str
    plane_url: str
    env: dict[str, str]
    lost: list[str]
    foreign_url: str | None = None


def _fastaiagent_store(tmp_path: Path) -> str:
    """The URL of a local.db the real fastaiagent SDK wrote (a paused, a resumed and a failed
    execution), for the explore notebook's foreign-store section."""
    db = tmp_path / "fastaiagent" / "local.db"
    db.parent.mkdir()
    subprocess.run(
        [sys.executable, str(HERE / "fastaiagent_runs.py"), "sqlite", str(db)],
        cwd=db.parent,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return f"fastaiagent+sqlite:///{db}"


def _provider_fleet(provider: str, tmp_path: Path, plane: Any) -> Iterator[Fleet]:
    """The demo fleet on Postgres or Redis, replicated to the test plane; an edge store whose
    runs reached the plane, then a fresh store on the same provider to restore them into; and
    a store the fastaiagent SDK wrote as the foreign one (the SQLite fleet has LangGraph's)."""
    main_target = make_target(provider, tmp_path / "main")
    edge_target = make_target(provider, tmp_path / "edge")
    fresh_target = make_target(provider, tmp_path / "fresh")
    main, edge, fresh = next(main_target), next(edge_target), next(fresh_target)
    try:
        main_key = plane.new_key()
        clock = FrozenClock(END - timedelta(days=DEMO_DAYS))
        with durability.open(main.url, clock=clock) as store:
            build_demo(store, clock, start=END - timedelta(days=DEMO_DAYS))
            conn = replication.connect(store, plane.url, main_key, background=False)
            conn.close()  # drains everything
            store.record_connection("", plane.url)
        edge_key = plane.new_key()
        clock = FrozenClock(END)
        with durability.open(edge.url, clock=clock) as store:
            threads = edge_runs(store, clock, END)
            replication.connect(store, plane.url, edge_key, background=False).close()
        yield Fleet(
            main.url,
            fresh.url,
            plane.url,
            {KEY_ENV["main"]: main_key, KEY_ENV["edge"]: edge_key},
            sorted(threads.values()),
            _fastaiagent_store(tmp_path),
        )
    finally:
        for gen in (main_target, edge_target, fresh_target):
            gen.close()


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    """The demo on SQLite (``build_fleet``, what ``durability demo`` runs), or the same runs on
    Postgres and Redis replicated to the test session's plane."""
    if request.param == "sqlite":
        with build_fleet(tmp_path / "out", end=END) as built:
            yield Fleet(
                built.store_url,
                built.edge_url,
                built.plane.url,
                built.plane.env(),
                built.lost_threads,
                built.foreign_url,
            )
        return
    plane = request.getfixturevalue("plane")
    yield from _provider_fleet(request.param, tmp_path, plane)


def _run(name: str, fleet: Fleet, tmp_path: Path, **params: Any) -> Any:
    charts = tmp_path / "charts"
    result = bundle.execute(
        ROOT / "notebooks" / name,
        {"output_dir": str(charts), **params},
        tmp_path / "executed",
        env=fleet.env,
        cwd=tmp_path,
    )
    nb = nbformat.read(result.path, as_version=4)
    _all_ran(nb)
    return nb


@pytest.mark.slow
def test_every_notebook_runs_on_every_provider(fleet: Fleet, tmp_path: Path) -> None:
    """explore_store, plan_retention and restore_runs run top to bottom through their parameters
    cell; the thread count, the sweep's numbers and the restored, resumed run are in the output."""
    with durability.open(fleet.store_url) as store:
        threads = len(list(store.iter_threads()))
        plan = plan_sweep(store, Settings.from_env(), END)
    deletes = sum(1 for row in plan.rows if row.action == "delete")
    spared = sum(1 for row in plan.rows if row.action == "spared")

    explore = _run(
        "explore_store.ipynb",
        fleet,
        tmp_path,
        store_url=fleet.store_url,
        plane_url=fleet.plane_url,
        api_key_env=KEY_ENV["main"],
        foreign_url=fleet.foreign_url,
    )
    text = _text(explore)
    assert f"{threads} threads, " in text
    assert "the plane holds " in text
    assert "cancelled" in text, "the failed runs by reason"
    assert re.search(r"a 2d outage from .*: up to \d+ rows waiting", text), text[-3000:]
    assert _pngs(explore) >= 3, "run health, backlog and outage backlog charts"
    buttons = [
        m["state"].get("description")
        for m in explore.metadata["widgets"]["application/vnd.jupyter.widget-state+json"][
            "state"
        ].values()
    ]
    assert "Release quarantined rows" in buttons, "the outbox monitor"
    if fleet.foreign_url is not None:  # LangGraph's (the langgraph extra) or fastaiagent's
        with durability.open(fleet.foreign_url) as foreign:
            foreign_threads = len(list(foreign.iter_threads()))
        assert foreign_threads > 0
        assert f"{foreign_threads} threads (read-only)" in text, "the foreign section"

    retention = _run("plan_retention.ipynb", fleet, tmp_path, store_url=fleet.store_url, now=NOW)
    text = _text(retention)
    assert f"the next sweep deletes {deletes} of {threads} threads and spares {spared}" in text
    assert "would lose " in text
    assert _pngs(retention) >= 3, "retention curve, idle gaps, sweep timeline"

    copies = tmp_path / "copies"
    resumed = [_restore_run(fleet, tmp_path, copies) for _ in range(2)]
    assert all(thread in fleet.lost for thread in resumed)
    if fleet.edge_url.startswith("sqlite"):
        # Each run restored into its own copy: the same parked run both times, the store as it was.
        assert resumed[0] == resumed[1]
        urls = [f"sqlite:///{path}" for path in sorted(copies.glob("*.db"))]
        assert len(urls) == 2
        with durability.open(fleet.edge_url) as store:
            assert not store.has_thread(resumed[0])
    else:  # restored into the store itself: the second run resumed the other parked run
        assert resumed[0] != resumed[1]
        urls = [fleet.edge_url, fleet.edge_url]
    for url, thread in zip(urls, resumed, strict=True):
        with durability.open(url) as store:
            latest = store.latest(thread)
        assert latest is not None
        assert (latest.step_type, latest.status) == ("run_end", "completed")
    charts = ("run_health", "backlog", "outage_backlog", "retention_curve", "idle_gaps")
    for name in (*charts, "sweep_timeline", "plane_run_health"):
        assert (tmp_path / "charts" / f"{name}.png").stat().st_size > 1000, name


def _restore_run(fleet: Fleet, tmp_path: Path, copies: Path) -> str:
    """restore_runs.ipynb once; the thread it restored and resumed (the panel opens on another)."""
    restored = _run(
        "restore_runs.ipynb",
        fleet,
        tmp_path,
        store_url=fleet.edge_url,
        copies_dir=str(copies),
        plane_url=fleet.plane_url,
        api_key_env=KEY_ENV["edge"],
    )
    text = _text(restored)
    match = re.search(r"resumed (\S+): completed", text)
    assert match, text[-2000:]
    states = restored.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    values = [str(m["state"].get("value", "")) for m in states.values()]
    assert any("would restore " in v for v in values), "the panel opens on a planned restore"
    return match.group(1)


@pytest.mark.slow
def test_every_notebook_runs_on_its_defaults_after_the_demo(tmp_path: Path) -> None:
    """With the demo in `durability-out/` and its plane stopped, each notebook runs top to bottom
    on its default parameters from a `notebooks/` folder beside it; restore_runs, given no plane,
    says how to start one and skips its restore sections without failing."""
    with build_fleet(tmp_path / "durability-out", end=END):
        pass  # the demo's plane stops here, as after `durability demo`
    folder = tmp_path / "notebooks"
    folder.mkdir()
    texts = {}
    for name in bundle.NOTEBOOK_NAMES:
        result = bundle.execute(bundle.notebook(name), {}, tmp_path / "executed", cwd=folder)
        nb = nbformat.read(result.path, as_version=4)
        _all_ran(nb)
        texts[name] = _text(nb)
    restore_text = texts["restore_runs.ipynb"]
    assert "no plane_url: a restore reads the plane" in restore_text
    assert "durability lab" in restore_text
    assert "durability plane serve" in restore_text
    assert restore_text.count("skipped: no plane (see above)") == 4
    assert "no plane_url: set it" in texts["explore_store.ipynb"]
    assert "the next sweep deletes " in texts["plan_retention.ipynb"]
    assert (tmp_path / "durability-out" / "charts" / "retention_curve.png").exists()
