"""The ops service: the admin-only checkpoint sweep over HTTP, and the sweep's Prometheus metrics.

``durability serve-ops URL`` serves :func:`create_ops_app` with uvicorn. Routes:

===========================================  ====================================================
``POST /api/checkpoints/sweep``              admin only (``Authorization: Bearer <token>``): run
                                             the sweep, or with ``{"dry_run": true}`` return its
                                             plan; ``{"now": "<ISO 8601>"}`` sweeps as of then
``GET  /metrics``                            the sweep's metrics and the store's outbox per
                                             project (``durability.metrics``), Prometheus text
``POST /api/babelfish/checkpoints/prune``    410 Gone, naming ``POST /api/checkpoints/sweep``
===========================================  ====================================================

The admin token is compared in constant time and never appears in a log line, a repr or an
error. One sweep (or plan) runs at a time per app: a request that arrives while one runs gets
409. A sweep that fails answers with the error's message: 409 for a refusal the sweep raised
(a thread it could not empty, a live-thread filter that failed), 503 when the store is
unreachable, 500 for anything else a consumer's filter raised. It deleted nothing after the
failure, and the service never retries it. Nothing here runs the sweep on its own: a scheduler
or cron calls the route (the sweep never runs in the background).
"""

from __future__ import annotations

import hmac
import logging
import threading
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from durability.asgi import BodyLimit
from durability.clock import parse_aware
from durability.errors import ConfigError, DurabilityError, StoreUnavailable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from durability.settings import Settings
    from durability.stores.base import Store
    from durability.sweep import LiveThreadFilter

log = logging.getLogger(__name__)

ENV_ADMIN_TOKEN = "DURABILITY_ADMIN_TOKEN"  # noqa: S105 - the variable's name, not a token
SWEEP_ROUTE = "/api/checkpoints/sweep"
PRUNE_ROUTE = "/api/babelfish/checkpoints/prune"
#: Shorter tokens are refused at start: an admin token that guards deletes must not be guessable.
MIN_TOKEN_CHARS = 16
BODY_FIELDS = ("dry_run", "now")
BODY_HINT = '{"dry_run": true, "now": "<ISO 8601>"} at most'
#: The largest request body the service reads: its one body is a few fields.
MAX_BODY = 64 * 1024


class _BadBody(Exception):
    """A request body the sweep route refuses (answered 400)."""


class OpsService:
    """The ops routes' handlers over one store. Its repr names the store, never the token."""

    def __init__(
        self,
        store: Store,
        settings: Settings | None,
        admin_token: str | None,
        *,
        filters: Sequence[LiveThreadFilter] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings if settings is not None else store.settings
        self.filters = filters
        self._token = _checked_token(admin_token)
        self._sweeping = threading.Lock()
        self._replication: Any = None
        if store.outbox is not None:
            from prometheus_client import CollectorRegistry

            from durability.metrics import OutboxCollector

            self._replication = CollectorRegistry(auto_describe=False)
            self._replication.register(OutboxCollector(store))

    def __repr__(self) -> str:
        return f"<OpsService {self.store!r} admin token set>"

    # ------------------------------------------------------------------ auth

    def _refusal(self, request: Request) -> Response | None:
        """``None`` for a request carrying the admin token, else its 401 or 403 answer."""
        scheme, _, presented = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            log.warning("refused a sweep request from %s: no admin token", _client(request))
            return _error(
                401,
                "the sweep needs the admin token: send `Authorization: Bearer <token>` "
                f"(the token the service was started with, {ENV_ADMIN_TOKEN})",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not hmac.compare_digest(presented.strip().encode(), self._token):
            log.warning("refused a sweep request from %s: wrong admin token", _client(request))
            return _error(403, f"the admin token does not match the service's {ENV_ADMIN_TOKEN}")
        return None

    # ------------------------------------------------------------------ routes

    async def sweep(self, request: Request) -> Response:
        """``POST /api/checkpoints/sweep``: the plan (dry run) or the sweep's result."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        try:
            dry_run, now = _sweep_options(await request.body())
        except _BadBody as exc:
            return _error(400, str(exc))
        if not self._sweeping.acquire(blocking=False):
            return _error(
                409,
                "a sweep is already running on this service; wait for it to finish and retry",
            )
        try:
            log.info(
                "sweep requested by %s (dry_run=%s, now=%s)",
                _client(request),
                dry_run,
                now.isoformat() if now else "the store's clock",
            )
            body = await run_in_threadpool(self._plan if dry_run else self._sweep, now)
        except StoreUnavailable as exc:
            log.error("the sweep failed, the store is unreachable: %s", exc)
            return _error(503, f"the sweep failed: {exc}", error=type(exc).__name__)
        except DurabilityError as exc:
            log.error("the sweep failed and stopped: %s", exc)
            return _error(409, f"the sweep failed: {exc}", error=type(exc).__name__)
        except Exception as exc:  # a consumer's filter may raise anything; answer, don't drop
            log.exception("the sweep failed unexpectedly")
            return _error(
                500, f"the sweep failed: {type(exc).__name__}: {exc}", error=type(exc).__name__
            )
        finally:
            self._sweeping.release()
        return _json(body)

    def _plan(self, now: datetime | None) -> dict[str, Any]:
        from durability.sweep import plan_sweep

        plan = plan_sweep(self.store, self.settings, now, filters=self.filters)
        return {
            "dry_run": True,
            "now": plan.now,
            "summary": plan.summary(),
            "rows": [asdict(row) for row in plan.rows],
        }

    def _sweep(self, now: datetime | None) -> dict[str, Any]:
        from durability.sweep import sweep

        result = sweep(self.store, self.settings, now, filters=self.filters)
        return {"dry_run": False, **result.to_dict()}

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: the sweep's counters and, for a store that replicates, its outbox
        per project, as Prometheus text (no auth: nothing secret; project ids are labels)."""
        from durability import metrics

        extra = () if self._replication is None else (self._replication,)
        body = await run_in_threadpool(metrics.render, *extra)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    async def prune(self, request: Request) -> Response:
        """The removed flows-engine prune route: 410, naming what replaced it."""
        return _error(
            410,
            f"POST {PRUNE_ROUTE} was removed: the checkpoint sweep replaces it; "
            f"call POST {SWEEP_ROUTE} with the admin token (retention comes from "
            "DURABILITY_WAITING_RETENTION and DURABILITY_FINISHED_RETENTION)",
            replacement=f"POST {SWEEP_ROUTE}",
        )


def _checked_token(admin_token: str | None) -> bytes:
    token = (admin_token or "").strip()
    if not token:
        raise ConfigError(
            "refusing to start the ops service without an admin token: set "
            f"{ENV_ADMIN_TOKEN} (e.g. to the output of "
            '`python -c "import secrets; print(secrets.token_urlsafe(32))"`)'
        )
    if not token.isascii() or not token.isprintable():
        raise ConfigError(
            f"refusing to start the ops service: {ENV_ADMIN_TOKEN} holds characters an HTTP "
            "header cannot carry; use printable ASCII (e.g. "
            '`python -c "import secrets; print(secrets.token_urlsafe(32))"`)'
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"refusing to start the ops service: {ENV_ADMIN_TOKEN} is {len(token)} characters, "
            f"fewer than {MIN_TOKEN_CHARS}; use a long random token (e.g. "
            '`python -c "import secrets; print(secrets.token_urlsafe(32))"`)'
        )
    return token.encode()


def _sweep_options(raw: bytes) -> tuple[bool, datetime | None]:
    """``(dry_run, now)`` from an optional JSON body; :class:`_BadBody` names the field and fix."""
    if not raw.strip():
        return False, None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _BadBody(
            f'the body is not JSON ({exc}); send {{"dry_run": true}}, '
            '{"now": "2026-12-02T18:00:00Z"}, both, or no body'
        ) from None
    if not isinstance(body, dict):
        raise _BadBody(
            f"the body must be a JSON object with the optional fields {', '.join(BODY_FIELDS)}, "
            f"not {type(body).__name__}"
        )
    unknown = sorted(set(body) - set(BODY_FIELDS))
    if unknown:
        raise _BadBody(
            f"unknown field {unknown[0][:40]!r} in the body; the sweep takes only "
            f"{', '.join(BODY_FIELDS)}"
        )
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise _BadBody(f"dry_run must be true or false, not {str(dry_run)[:40]!r}")
    now = None
    if body.get("now") is not None:
        now = parse_aware(body["now"])
        if now is None:
            raise _BadBody(
                f"now={str(body['now'])[:60]!r} is not an ISO 8601 time with a timezone; "
                'write it like "2026-12-02T18:00:00Z" or "2026-12-02T19:00:00+01:00"'
            )
    return dry_run, now


def _client(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "an unknown client"


def _jsonable(value: Any) -> Any:
    """What orjson cannot write itself: durations, as seconds (as the CLI's ``--json`` does)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        orjson.dumps(data, default=_jsonable, option=orjson.OPT_NON_STR_KEYS),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _error(
    status: int, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    return _json({"detail": detail, **extra}, status, headers)


def create_ops_app(
    store: Store,
    settings: Settings | None = None,
    admin_token: str | None = None,
    *,
    filters: Sequence[LiveThreadFilter] | None = None,
) -> Starlette:
    """The ops service as an ASGI application over ``store``.

    ``settings`` are the retention values the sweep applies (default: the store's).
    ``admin_token`` guards the sweep route; an empty or short one is refused with a
    :class:`~durability.errors.ConfigError` naming ``DURABILITY_ADMIN_TOKEN``. ``filters``
    replaces the registered live-thread filters (default: every registered one).
    """
    service = OpsService(store, settings, admin_token, filters=filters)
    app = Starlette(
        routes=[
            Route(SWEEP_ROUTE, service.sweep, methods=["POST"]),
            Route("/metrics", service.metrics, methods=["GET"]),
            Route(PRUNE_ROUTE, service.prune, methods=["POST"]),
        ],
        middleware=[
            Middleware(BodyLimit, max_bytes=MAX_BODY, advice=f"the sweep takes {BODY_HINT}")
        ],
    )
    app.state.ops = service
    return app


__all__ = ["ENV_ADMIN_TOKEN", "OpsService", "create_ops_app"]
