"""``durability lab``: open JupyterLab on the bundle's notebooks, pointed at a store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from durability.cli._common import ENV_PLANE_KEY, ENV_PLANE_URL, friendly_errors, out_option


@click.command()
@click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="The store the notebooks open (default: the demo store in OUT).",
)
@out_option(
    "durability-out",
    "The demo folder: the notebooks are copied to OUT/lab, charts go to OUT/charts.",
)
@click.option("--port", type=int, default=8888, show_default=True, help="JupyterLab's port.")
@click.option("--no-browser", is_flag=True, help="Do not open a browser (print the URL only).")
def lab(store_url: str | None, out: Path, port: int, no_browser: bool) -> None:
    """Open JupyterLab (127.0.0.1) on the three notebooks, pointed at the demo or at --store.

    The notebooks are copied to OUT/lab with their parameters cell filled in (the committed
    ones stay stripped); copies from an earlier launch are replaced. With the demo in OUT, its
    plane is served on loopback while JupyterLab runs, and the kernels get fresh API keys in
    DURABILITY_PLANE_API_KEY and DURABILITY_EDGE_PLANE_API_KEY. With --store, the plane is
    DURABILITY_PLANE_URL (its key in DURABILITY_PLANE_API_KEY), if set. Stop with Ctrl-C.
    """
    import json

    from durability import bundle
    from durability.demo import MANIFEST, notebook_parameters, serve_demo_plane

    manifest_path = out / MANIFEST
    if store_url is None and not manifest_path.exists():
        raise click.ClickException(
            f"cannot open the lab: there is no demo in {out} ({MANIFEST} is missing); run "
            "`durability demo` first, or pass --store URL"
        )
    with friendly_errors(), ExitStack() as stack:
        env: dict[str, str] = {}
        charts = (out / "charts").resolve()
        if manifest_path.exists() and store_url is None:
            manifest = json.loads(manifest_path.read_text())
            plane = stack.enter_context(serve_demo_plane(out))
            env.update(plane.env())
            params = notebook_parameters(manifest, plane.url, charts)
            click.echo(f"demo plane: {plane.url}")
        else:
            params = _store_parameters(str(store_url), charts)
        folder = out / "lab"
        bundle.write_copies(folder, params)
        click.echo(f"notebooks: {folder.resolve()}")
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={folder.resolve()}",
        ]
        if no_browser:
            command.append("--no-browser")
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")  # JupyterLab exits as root without it
        code = _serve(command, bundle.kernel_env(env))
    sys.exit(code)


def _serve(command: list[str], env: dict[str, str]) -> int:
    """Run JupyterLab until it exits; Ctrl-C or SIGTERM to this process stops it (and its
    kernels) too, so it never outlives the plane this process serves."""
    server = subprocess.Popen(command, env=env)  # noqa: S603 - this interpreter, fixed arguments
    previous = signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server.poll() is None:
            server.kill()


def _store_parameters(store_url: str, charts: Path) -> dict[str, dict[str, Any]]:
    """Parameters for a store of the user's own: the plane from the environment, if any."""
    plane_url = os.environ.get(ENV_PLANE_URL) or None
    common = {"store_url": store_url, "output_dir": str(charts)}
    return {
        "explore_store.ipynb": {**common, "plane_url": plane_url, "api_key_env": ENV_PLANE_KEY},
        "plan_retention.ipynb": common,
        "restore_runs.ipynb": {**common, "plane_url": plane_url, "api_key_env": ENV_PLANE_KEY},
    }
