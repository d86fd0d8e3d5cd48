"""``durability plane serve|keys|domains``: run the reference plane and manage its keys and entitlements."""

from __future__ import annotations

import gc

import click

from durability.cli._common import friendly_errors, json_option, listen_options, print_json

DEFAULT_DB = "sqlite:///durability-plane.db"
db_option = click.option(
    "--db",
    "db_url",
    envvar="DURABILITY_PLANE_DB",
    default=DEFAULT_DB,
    show_default=True,
    help="The plane's database (SQLAlchemy URL; DURABILITY_PLANE_DB).",
)


@click.group()
def plane() -> None:
    """Run the reference checkpoint plane and manage its API keys and entitlements."""


@plane.command("serve")
@db_option
@listen_options(8700)
@click.option(
    "--compat", is_flag=True, help="Refuse whole batches with 413/422, as older planes do."
)
@click.option(
    "--latest-only",
    is_flag=True,
    help="Serve no history (404 on the history path), as a plain fastaiagent plane does.",
)
@click.option(
    "--max-body",
    default="64MiB",
    show_default=True,
    metavar="SIZE",
    help="The largest request body read (bytes, or 512KiB, 64MiB…); larger ones get 413 "
    "while they stream in, before they are held in memory.",
)
def serve(
    db_url: str, host: str, port: int, compat: bool, latest_only: bool, max_body: str
) -> None:
    """Serve the plane (ingest, latest, history, run health, the SDK's connect-time endpoints)."""
    import uvicorn

    from durability.humanize import parse_size
    from durability.plane import PlaneCaps, create_app
    from durability.plane.server import server_config

    with friendly_errors():
        caps = PlaneCaps(body_bytes=parse_size(max_body, name="--max-body"))
        app = create_app(db_url, compat=compat, history=not latest_only, caps=caps)
    click.echo(
        f"plane on http://{host}:{port} over {app.state.plane.storage!r}"
        + (" (compat mode)" if compat else "")
        + (" (latest only)" if latest_only else "")
    )
    # Everything loaded so far lives as long as the process: keep it out of the cyclic
    # collector's full passes, which otherwise walk it while an ingest parses a batch of
    # ~30,000 small objects (pauses of tens of milliseconds per batch).
    gc.freeze()
    uvicorn.Server(server_config(app, host=host, port=port, log_level="info")).run()


@plane.group("keys")
def keys() -> None:
    """Create API keys (scoped to a domain and a project)."""


@keys.command("create")
@db_option
@click.option("--domain", required=True, help="The tenant's domain.")
@click.option("--project", required=True, help="The project within the domain.")
@click.option(
    "--entitled", is_flag=True, help="Also grant the domain the connected_state_plane entitlement."
)
@click.option(
    "--can-erase",
    is_flag=True,
    help="Let the key erase executions of its project (durability threads erase --plane).",
)
@json_option
def create_key(
    db_url: str, domain: str, project: str, entitled: bool, can_erase: bool, as_json: bool
) -> None:
    """Create a key and print it once (only its hash is stored; it cannot be shown again)."""
    from durability.plane import PlaneStorage

    with friendly_errors():
        storage = PlaneStorage(db_url)
        made = storage.create_key(
            domain, project, entitled=True if entitled else None, can_erase=can_erase
        )
        storage.close()
    if as_json:
        print_json(
            {
                "api_key": made.api_key,
                "key_id": made.key_id,
                "domain": domain,
                "project": project,
                "entitled": entitled,
                "can_erase": can_erase,
            }
        )
        return
    click.echo(made.api_key)
    click.echo(
        f"key {made.key_id} for domain {domain!r}, project {project!r}; store it now, it is not shown again",
        err=True,
    )


@plane.group("domains")
def domains() -> None:
    """Grant or revoke a domain's connected_state_plane entitlement (ingest answers 403 without it)."""


def _entitle(db_url: str, domain: str, entitled: bool, as_json: bool) -> None:
    from durability.plane import PlaneStorage

    with friendly_errors():
        storage = PlaneStorage(db_url)
        storage.set_entitlement(domain, entitled)
        storage.close()
    if as_json:
        print_json({"domain": domain, "connected_state_plane": entitled})
    else:
        click.echo(
            f"domain {domain!r}: connected_state_plane {'granted' if entitled else 'revoked'}"
        )


@domains.command("entitle")
@db_option
@click.argument("domain")
@json_option
def entitle(db_url: str, domain: str, as_json: bool) -> None:
    """Grant DOMAIN the connected_state_plane entitlement."""
    _entitle(db_url, domain, True, as_json)


@domains.command("revoke")
@db_option
@click.argument("domain")
@json_option
def revoke(db_url: str, domain: str, as_json: bool) -> None:
    """Revoke DOMAIN's connected_state_plane entitlement (its rows stay buffered in the clients)."""
    _entitle(db_url, domain, False, as_json)
