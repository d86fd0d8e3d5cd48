"""``durability serve-ops``: the ops service (the admin-only sweep route and the sweep's metrics)."""

from __future__ import annotations

import logging
import os

import click

from durability.cli._common import friendly_errors, listen_options, open_store, url_argument


@click.command("serve-ops")
@url_argument
@listen_options(8470)
def serve_ops(url: str, host: str, port: int) -> None:
    """Serve the ops service over the store at URL.

    Routes: POST /api/checkpoints/sweep (admin only: `Authorization: Bearer <token>`; body
    optional, {"dry_run": true} for the plan, {"now": "<ISO 8601>"} to sweep as of then),
    GET /metrics (Prometheus text) and POST /api/babelfish/checkpoints/prune (410 Gone).

    The admin token is read from the environment variable DURABILITY_ADMIN_TOKEN (never from
    the command line, where other users could read it); the service refuses to start without
    one. Nothing runs the sweep in the background: call the route from cron or a scheduler.
    """
    import uvicorn

    from durability.plane.server import server_config
    from durability.service import ENV_ADMIN_TOKEN, create_ops_app

    token = os.environ.get(ENV_ADMIN_TOKEN, "")
    with friendly_errors(), open_store(url) as store:
        app = create_ops_app(store, store.settings, token)
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        click.echo(f"ops service on http://{host}:{port} over {store!r}")
        uvicorn.Server(server_config(app, host=host, port=port, log_level="info")).run()
