"""``durability runs`` and ``durability resume`` on a real SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import runner_defs
from click.testing import CliRunner

import durability
from durability.cli import cli
from durability.runs import Runner
from durability.settings import Settings

TESTS = Path(__file__).resolve().parent


def _store(path: Path) -> durability.stores.Store:
    return durability.open(f"sqlite:///{path}", settings=Settings(), single_worker=True)


def test_runs_lists_statuses_leases_and_parks(tmp_path: Path) -> None:
    """`durability runs URL --json` shows each run's status, last step, lease and park with time left."""
    path = tmp_path / "runs.db"
    with _store(path) as store:
        done = Runner("r", [("a", lambda s, c: s)]).start(store, {})
        parked = runner_defs.approval.start(store, {"topic": "cli"})
        store.acquire_lease(done.thread_id, "worker-x", timedelta(minutes=5), run_id=done.run_id)
    result = CliRunner().invoke(cli, ["runs", f"sqlite:///{path}", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["thread_id"]: r for r in json.loads(result.output)}
    assert rows[done.thread_id]["status"] == "completed"
    assert rows[done.thread_id]["lease_holder"] == "worker-x"
    waiting = rows[parked.thread_id]
    assert (waiting["status"], waiting["last_step"], waiting["park_reason"]) == (
        "parked",
        "approve",
        "needs approval",
    )
    assert 0 < waiting["time_left"] <= timedelta(days=2).total_seconds()
    table = CliRunner().invoke(cli, ["runs", f"sqlite:///{path}"])
    assert table.exit_code == 0
    assert "parked" in table.output
    assert "needs approval" in table.output
    assert "worker-x" not in table.output


def test_resume_command_answers_a_parked_run_then_refuses_it(tmp_path: Path) -> None:
    """`durability resume … --value JSON` completes a parked run; a second resume exits 2 saying it completed."""
    path = tmp_path / "resume.db"
    url = f"sqlite:///{path}"
    with _store(path) as store:
        parked = runner_defs.approval.start(store, {"topic": "cli"})
    runner = CliRunner()
    needs_value = runner.invoke(
        cli, ["resume", url, parked.thread_id, "--runner", "runner_defs:approval"]
    )
    assert needs_value.exit_code == 2
    assert "--value" in needs_value.output
    bad = runner.invoke(
        cli,
        ["resume", url, parked.thread_id, "--runner", "runner_defs:approval", "--value", "{nope"],
    )
    assert bad.exit_code == 2
    assert "is not JSON" in bad.output
    done = runner.invoke(
        cli,
        [
            "resume",
            url,
            parked.thread_id,
            "--runner",
            "runner_defs:make_approval",
            "--value",
            '{"approved": true}',
            "--json",
        ],
    )
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert (data["status"], data["run_id"], data["state"]["published"]) == (
        "completed",
        parked.run_id,
        True,
    )
    again = runner.invoke(
        cli, ["resume", url, parked.thread_id, "--runner", "runner_defs:approval", "--value", "{}"]
    )
    assert again.exit_code == 2
    assert "already completed" in again.output
    unknown = runner.invoke(
        cli, ["resume", url, parked.thread_id, "--runner", "runner_defs:nothing"]
    )
    assert unknown.exit_code == 1
    assert "no attribute" in unknown.output


def test_resume_command_steps_a_run_one_step_at_a_time(tmp_path: Path) -> None:
    """`durability resume … --steps 1` runs one step and pauses (exit 0); a bad count is refused untouched."""
    path = tmp_path / "steps.db"
    url = f"sqlite:///{path}"
    with _store(path) as store:
        paused = runner_defs.crashy.start(store, {}, max_steps=1)
    runner = CliRunner()
    base = ["resume", url, paused.thread_id, "--runner", "runner_defs:crashy"]
    zero = runner.invoke(cli, [*base, "--steps", "0"])
    assert zero.exit_code == 2
    assert "--steps" in zero.output
    step = runner.invoke(cli, [*base, "--steps", "1", "--json"])
    assert step.exit_code == 0, step.output
    data = json.loads(step.output)
    assert (data["status"], data["last_step"], data["run_id"]) == ("paused", "two", paused.run_id)
    listed = json.loads(runner.invoke(cli, ["runs", url, "--json"]).output)
    assert [(r["status"], r["last_step"]) for r in listed] == [("stalled", "two")]
    done = runner.invoke(cli, base)
    assert done.exit_code == 0, done.output
    assert "completed" in done.output
    assert "last step: three" in done.output


def test_resume_command_in_its_own_process(tmp_path: Path) -> None:
    """The installed `durability resume` imports a runner module from the current directory and exits 1 on a failed run."""
    (tmp_path / "myrunners.py").write_text(
        "from durability.runs import Runner\n"
        "def boom(state, ctx):\n    raise RuntimeError('still broken')\n"
        "broken = Runner('broken', [('boom', boom)])\n"
    )
    url = f"sqlite:///{tmp_path / 'own.db'}"
    sys.path.insert(0, str(tmp_path))
    try:
        import myrunners

        with durability.open(url, settings=Settings()) as store:
            failed = myrunners.broken.start(store, {})
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("myrunners", None)
    out = subprocess.run(
        # -P: like the installed console script, the current directory is not on sys.path.
        [
            sys.executable,
            "-P",
            "-c",
            "from durability.cli import main; main()",
            "resume",
            url,
            failed.thread_id,
            "--runner",
            "myrunners:broken",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert out.returncode == 1, out.stderr
    assert "failed" in out.stdout
    assert "RuntimeError: still broken" in out.stdout


def _env() -> dict[str, str]:
    import os

    root = str(TESTS.parent)
    return {**os.environ, "PYTHONPATH": root}
