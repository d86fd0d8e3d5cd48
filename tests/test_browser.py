"""The notebooks in a real JupyterLab, driven by headless Chromium (Playwright).

``durability lab`` serves JupyterLab on loopback over a demo fleet built in a temp folder (its
plane served by the lab command, as for a user); Debian's ``chromium`` opens each notebook,
runs all cells twice in the same kernel, and the test checks what a user would see: every cell
ran without an error both times, selecting a row of the largest threads shows that thread in
the store explorer, moving the retention slider changes the planner's summary,
pressing Restore then Resume in the restore panel applies the plan and completes the run, and
the browser logged no console error. A screenshot per notebook is
saved under ``test-artifacts/`` (git-ignored). In CI (``CI=true``) a missing browser fails the
test; elsewhere it skips with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from durability.demo import build_fleet, run_notebooks

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
IN_CI = os.environ.get("CI", "").lower() == "true"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: Console messages that are not errors of the page: Chromium's own network notices for
#: requests JupyterLab makes optionally (translations, news) and answers 404 to.
BENIGN_CONSOLE = ("Failed to load resource: the server responded with a status of 404",)


def _need_browser() -> str:
    if CHROMIUM is None:
        reason = "Debian's chromium is not installed (apt-get install chromium)"
        if IN_CI:
            pytest.fail(f"a browser is required in CI: {reason}")
        pytest.skip(reason)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        if IN_CI:
            pytest.fail(f"playwright is required in CI: {exc}")
        pytest.skip(f"playwright is not installed: {exc}")
    return CHROMIUM


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Lab:
    url: str
    token: str
    out: Path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """``durability lab --no-browser`` on a fresh demo fleet, until the module's tests end."""
    browser = _need_browser()
    del browser
    base = tmp_path_factory.mktemp("lab")
    out = base / "out"
    with build_fleet(out) as fleet:  # what `durability demo` does, restore_runs included
        run_notebooks(fleet, names=("restore_runs.ipynb",))
    # the fleet's plane stops here; the lab command serves it again from plane.db
    settings = base / "settings"
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    # Keep every cell in the page: a windowed notebook detaches the cells scrolled out of view,
    # and the widgets the tests press live in the last ones.
    tracker = settings / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    token, port = secrets.token_hex(16), _free_port()
    env = {
        **os.environ,
        "JUPYTER_TOKEN": token,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(base / "workspaces"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    log = (base / "lab.log").open("w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durability",
            "lab",
            "--out",
            str(out),
            "--no-browser",
            "--port",
            str(port),
        ],
        env=env,
        cwd=base,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, token, server, base / "lab.log")
        yield Lab(url, token, out)
    finally:
        _stop(url, token, server)
        log.close()


#: How long JupyterLab may take to answer after `durability lab` starts it: a readiness wait
#: with room for a loaded 2-core machine, not a speed target.
LAB_START_SECONDS = 120


def _wait_ready(url: str, token: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + LAB_START_SECONDS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(
                f"durability lab exited with {server.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            if (
                httpx.get(f"{url}/api/status", params={"token": token}, timeout=2).status_code
                == 200
            ):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(
        f"JupyterLab did not answer within {LAB_START_SECONDS} s:\n{log.read_text()[-3000:]}"
    )


def _stop(url: str, token: str, server: subprocess.Popen[bytes]) -> None:
    """Shut the kernels down through the API, then stop the server (SIGTERM, then SIGKILL)."""
    headers = {"Authorization": f"token {token}"}
    try:
        for session in httpx.get(f"{url}/api/sessions", headers=headers, timeout=5).json():
            httpx.delete(f"{url}/api/sessions/{session['id']}", headers=headers, timeout=5)
    except httpx.HTTPError:
        pass
    server.terminate()
    try:
        server.wait(15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(5)
    # `durability lab` stops its JupyterLab when it is stopped: the port is released.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/api/status", timeout=1)
        except httpx.HTTPError:
            return
        time.sleep(0.3)
    pytest.fail(f"JupyterLab still answers on {url} after `durability lab` was stopped")


@pytest.fixture(scope="module")
def browser(lab: Lab) -> Iterator[Any]:
    """Headless Debian Chromium under Playwright (its bundled browsers are not used)."""
    from playwright.sync_api import sync_playwright

    profile = lab.out.parent / "chromium-profile"
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile),
            executable_path=_need_browser(),
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()


@dataclass
class Opened:
    page: Any
    errors: list[str]


def _open_and_run_all(browser: Any, lab: Lab, name: str) -> Opened:
    """Open a notebook, wait for its kernel, run all cells and wait until every cell has run;
    then run them all again in the same kernel, as a user who presses Run All twice."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = browser.new_page()
    errors: list[str] = []
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and not msg.text.startswith(BENIGN_CONSOLE)
            else None
        ),
    )
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{lab.url}/lab/tree/{name}?token={lab.token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # A fresh workspace may ask which kernel to start: the notebook's own (python3) is preselected.
    with contextlib.suppress(PlaywrightTimeout):
        page.click(".jp-Dialog .jp-mod-accept", timeout=5_000)
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=60_000)
    first = _run_all(page, name, after=0)
    _run_all(page, name, after=first)
    return Opened(page, errors)


def _run_all(page: Any, name: str, *, after: int) -> int:
    """Run All Cells; wait until every code cell shows an execution count above ``after``
    ("[*]:" while queued or running); assert no cell failed; the highest count."""
    page.click(".lm-MenuBar-itemLabel:text-is('Run')")
    page.click(".lm-Menu-itemLabel:text-is('Run All Cells')")
    page.wait_for_function(
        """after => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
            return prompts.length > 0 && prompts.every(p => {
                const n = /\\[(\\d+)\\]/.exec(p.textContent);
                return n !== null && Number(n[1]) > after;
            });
        }""",
        arg=after,
        timeout=120_000,
    )
    failed = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    tracebacks = [t for t in failed.all_inner_texts() if "Traceback" in t or "Error" in t]
    assert tracebacks == [], f"{name}: a cell failed:\n{tracebacks[0][:2000]}"
    counts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    return max(int(m.group(1)) for t in counts if (m := re.search(r"\[(\d+)\]", t)))


def _screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{Path(name).stem}.png"), full_page=False)


def test_explore_store_runs_in_jupyterlab(browser: Any, lab: Lab) -> None:
    """All cells run; the thread count and the store explorer's picker are on the page; a row
    selected in the largest threads' table becomes the explorer's thread."""
    opened = _open_and_run_all(browser, lab, "explore_store.ipynb")
    page = opened.page
    page.wait_for_selector(".jp-OutputArea-output:has-text('threads, ')")
    explorer = page.locator(".durability-explorer-thread select").first
    explorer.wait_for()
    rows = page.locator(".durability-rows-list select").first
    rows.scroll_into_view_if_needed()
    shown = rows.locator("option").all_inner_texts()
    assert len(shown) >= 3, shown
    before = explorer.input_value()
    picked = next(
        n for n, text in enumerate(shown) if not before.startswith(text.split()[0].rstrip("…"))
    )
    rows.select_option(index=picked)  # what a click on the row does: the list's change event
    prefix = shown[picked].split()[0].rstrip("…")
    page.wait_for_function(
        "([sel, prefix]) => document.querySelector(sel).value.startsWith(prefix)",
        arg=[".durability-explorer-thread select", prefix],
        timeout=30_000,
    )
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=60_000)
    assert explorer.input_value().startswith(prefix)
    assert explorer.input_value() != before
    _screenshot(page, "explore_store.ipynb")
    assert opened.errors == []


def _deletes(summary: str) -> int:
    """The thread count of the planner's summary ("… would delete 38 of 51 threads …")."""
    found = re.search(r"would delete ([\d,]+) of", summary)
    assert found, summary
    return int(found.group(1).replace(",", ""))


def test_moving_the_retention_slider_changes_the_summary(browser: Any, lab: Lab) -> None:
    """The planner's waiting slider, moved from 30 to 7 days with the keyboard: once the kernel
    has answered every move (the summary names 7d, the kernel is idle) the sweep deletes more."""
    opened = _open_and_run_all(browser, lab, "plan_retention.ipynb")
    page = opened.page
    summary = page.locator(".durability-retention-summary").first
    summary.wait_for()
    before = summary.inner_text()
    assert "with waiting 30d /" in before, before
    handle = page.locator(".durability-retention-waiting .noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    for _ in range(23):  # 23 days shorter: past the idle gaps of the demo's conversations
        page.keyboard.press("ArrowLeft")
    page.wait_for_function(
        "sel => document.querySelector(sel).innerText.includes('with waiting 7d /')",
        arg=".durability-retention-summary",
        timeout=60_000,
    )
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=60_000)
    after = summary.inner_text()
    assert "with waiting 7d /" in after, after
    assert _deletes(after) > _deletes(before), (before, after)
    summary.scroll_into_view_if_needed()
    _screenshot(page, "plan_retention.ipynb")
    assert opened.errors == []


def test_pressing_restore_then_resume_on_the_second_run(browser: Any, lab: Lab) -> None:
    """restore_runs.ipynb run twice in one kernel (after the demo ran it once headless): the
    second run ends at the restore panel, prefilled with a lost parked run; Restore writes the
    plan and Resume completes the run."""
    opened = _open_and_run_all(browser, lab, "restore_runs.ipynb")
    page = opened.page
    page.wait_for_selector(".jp-OutputArea-output:has-text('resumed ')")
    status = page.locator(".durability-restore-status").first
    status.wait_for()
    panel = page.locator(".durability-restore")
    # The plan's table is an interactive one: the notebook loaded the tables' script first.
    page.wait_for_function(
        "sel => !document.querySelector(sel).innerText.includes('Loading ITables')",
        arg=".durability-restore-plan-table",
        timeout=30_000,
    )
    button = panel.get_by_role("button", name="Restore", exact=True)
    button.wait_for(timeout=60_000)
    button.scroll_into_view_if_needed()
    button.click()
    page.wait_for_function(
        "sel => /restored/i.test(document.querySelector(sel).innerText)",
        arg=".durability-restore-status",
        timeout=30_000,
    )
    panel.get_by_role("button", name="Resume", exact=True).click()
    page.wait_for_function(
        "sel => /: completed/.test(document.querySelector(sel).innerText)",
        arg=".durability-restore-status",
        timeout=30_000,
    )
    _screenshot(page, "restore_runs.ipynb")
    assert opened.errors == []
