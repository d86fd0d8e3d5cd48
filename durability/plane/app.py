"""The reference plane: a Starlette application speaking the fastaiagent public API.

Endpoints (every one authenticated by ``X-API-Key``, scoped to the key's domain and project):

=========================================================  ============================================
``GET  /public/v1/auth/check``                             the key's domain, project and scopes, and
                                                           the caps the plane enforces (``limits``)
``GET  /public/v1/policy``                                 an empty governance policy
``POST /public/v1/governance/enroll``                      accepts the SDK's attestation
``POST /public/v1/sdk/agents``                             registers an agent (upsert by name)
``POST /public/v1/checkpoints/ingest``                     insert-only, idempotent ingest; 403 without
                                                           the ``connected_state_plane`` entitlement
``GET  /public/v1/checkpoints/{execution_id}/latest``      the latest item (404 when none)
``GET  /public/v1/checkpoints/{execution_id}``             history, paged (``limit``, ``cursor``)
``GET  /public/v1/runs``                                   fleet run health, paged
``POST /public/v1/checkpoints/erase``                      erase an execution (``{"execution_id"}``):
                                                           keys created with the erase permission
                                                           only (403 otherwise); idempotent
``POST /public/v1/checkpoints/digest``                     per execution: row count and checksum of
                                                           the checkpoint ids (``ids``: the ids too)
=========================================================  ============================================

Erasure records the tombstone (a keyed hash of the execution id under the tenant's secret) before
it deletes; afterwards ingest answers the execution's items with a per-item rejection (the rest
of the batch lands) and the reads answer 404 with ``"erased": true``.

Ingest answers 201 ``{ingested, rejected, rejections}``: an item the plane will not store (over
a cap, a malformed field, a time it cannot read) is refused on its own, each rejection naming the
item's ``checkpoint_id``, ``execution_id`` and ``namespace`` with the reason (``state_snapshot is
N bytes, over the 1048576-byte cap``). Rows are keyed as the stores key them (execution,
namespace, checkpoint id), and ``auth/check`` announces it (``features.checkpoint_key``), so a
client sends its own ids. In compatibility mode (``compat=True``) the plane behaves as older
planes do: it keeps checkpoint ids unique per tenant and announces nothing, and it refuses the
whole batch instead of one item, 413 for size, 422 for a field and 409 for an id another
execution holds, naming the first offender (``checkpoint_id`` and ``execution_id`` in the body).
With ``history=False`` the plane serves only ``…/latest`` and answers 404 on the history path,
as a plain fastaiagent plane does (a client then falls back to latest).

Every body is read under a cap as it streams in (:class:`~durability.asgi.BodyLimit`: 413 past
it), and nothing a client sends gets a 5xx: a value the plane cannot store is refused by name.
Execution ids are read from the raw request path and percent-decoded segment by segment, so an id
holding ``/``, ``?``, ``#``, ``..`` or a newline addresses exactly that execution; "no checkpoint"
answers echo the execution id they looked up, so a client can tell them from a router's 404. The
plane never runs agent code: it stores and serves JSON.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import unquote

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from durability._version import __version__
from durability.asgi import BodyLimit
from durability.errors import ConfigError
from durability.plane.erasure import ERASED_REASON
from durability.plane.items import PlaneCaps, Refusal, named, validate
from durability.plane.storage import Conflict, PlaneStorage, Row, Tenant
from durability.replication.wire import ROW_KEY

SCOPES = ["checkpoint:write", "checkpoint:read", "agent:write"]
ENTITLEMENT = "connected_state_plane"
#: Ingest bodies one plane process parses and stores at once (the others wait, already read):
#: bounds the memory their parsed items take, whatever the number of clients.
INGEST_WORKERS = 4
#: How many executions one digest request may name.
DIGEST_EXECUTIONS = 1000
#: Page cursors longer than this are not ones the plane issued.
_CURSOR_CHARS = 200


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _error(status: int, detail: str, **extra: Any) -> Response:
    return _json({"detail": detail, **extra}, status)


class Plane:
    """The plane's request handlers over one :class:`PlaneStorage`."""

    def __init__(
        self,
        storage: PlaneStorage,
        *,
        compat: bool = False,
        history: bool = True,
        caps: PlaneCaps | None = None,
    ) -> None:
        self.storage = storage
        self.compat = compat
        self.history = history
        self.caps = caps or PlaneCaps()
        self._ingesting = threading.BoundedSemaphore(INGEST_WORKERS)

    def tenant(self, request: Request) -> Tenant | None:
        return self.storage.authenticate(request.headers.get("x-api-key", ""))

    # ------------------------------------------------------------------ connect-time

    async def auth_check(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        features: dict[str, Any] = {
            "checkpoint_history": self.history,
            "per_item_rejections": not self.compat,
        }
        if not self.compat:
            features["checkpoint_key"] = list(ROW_KEY)  # a client then sends its own ids
        return _json(
            {
                "domain_id": tenant.domain_id,
                "project_id": tenant.project_id,
                "scopes": SCOPES,
                "key_id": tenant.key_id,
                "entitlements": {ENTITLEMENT: tenant.entitled},
                "limits": self.caps.announced(),
                "features": features,
                "plane": f"durability/{__version__}",
            }
        )

    async def policy(self, request: Request) -> Response:
        if self.tenant(request) is None:
            return _error(401, "invalid or revoked API key")
        return _json(
            {"version": "durability-plane-1", "approval_policies": [], "guardrail_rules": []}
        )

    async def enroll(self, request: Request) -> Response:
        if self.tenant(request) is None:
            return _error(401, "invalid or revoked API key")
        body = await _object_body(request)
        fail_mode = body.get("fail_mode")
        return _json(
            {
                "instance_id": _text(body.get("instance_id"))[:255],
                "fail_mode": fail_mode if fail_mode in ("open", "closed") else "open",
            }
        )

    async def register_agent(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        body = await _object_body(request)
        name = body.get("name")
        limit = self.caps.agent_id_chars
        if not isinstance(name, str) or not name or len(name) > limit or "\x00" in name:
            return _error(
                422, f"an agent needs a name of 1 to {limit} characters, without NUL (a string)"
            )
        return _json(await run_in_threadpool(self.storage.upsert_agent, tenant, name, body), 201)

    # ------------------------------------------------------------------ ingest

    async def ingest(self, request: Request) -> Response:
        """``POST …/checkpoints/ingest``. Only reading the body runs on the event loop: the key
        look-up, parsing, validation and storage run on a worker thread, so one batch is parsed
        and checked while another is being stored (decision 0155)."""
        tenant = await run_in_threadpool(self.tenant, request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        if not tenant.entitled:
            return _error(403, f"the domain {tenant.domain_id!r} is not entitled to {ENTITLEMENT}")
        body = await request.body()
        return await run_in_threadpool(self.ingest_body, tenant, body)

    def ingest_body(self, tenant: Tenant, body: bytes) -> Response:
        """Ingest a read body for an authenticated, entitled tenant (blocking: a worker thread;
        at most :data:`INGEST_WORKERS` at once)."""
        with self._ingesting:
            return self._ingest(tenant, body)

    def _ingest(self, tenant: Tenant, body: bytes) -> Response:
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _error(400, "the body is not JSON")
        items = payload.get("checkpoints") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            return _error(422, 'the body must be {"checkpoints": [item, …]}')
        rows: list[Row] = []
        rejections: list[dict[str, str]] = []
        limits = self.caps.text_limits()
        for item in items:
            names = named(item)
            if names is None:
                return _error(
                    422,
                    "every checkpoint must be an object with a non-empty checkpoint_id and "
                    "execution_id (strings)",
                )
            try:
                rows.append(validate(item, self.caps, limits))
            except Refusal as refusal:
                if self.compat:
                    return _refused(refusal.status, names, refusal.reason)
                rejections.append({**names, "reason": refusal.reason})
        rows = self._drop_erased(tenant, rows, rejections)
        stored, conflicts = self.storage.insert(tenant, rows, unique_ids=self.compat)
        if conflicts and self.compat:
            return _refused(409, _conflict_names(conflicts[0]), conflicts[0].reason)
        rejections += [{**_conflict_names(c), "reason": c.reason} for c in conflicts]
        return _json(
            {"ingested": stored, "rejected": len(rejections), "rejections": rejections}, 201
        )

    def validate(self, item: dict[str, Any]) -> Row:
        """Check one item (shape first, then caps) and turn it into a row (raises
        :class:`~durability.plane.items.Refusal`)."""
        return validate(item, self.caps)

    def _drop_erased(
        self, tenant: Tenant, rows: list[Row], rejections: list[dict[str, str]]
    ) -> list[Row]:
        """The rows of executions the tenant has not erased; the others are rejected by name."""
        erased = self.storage.erased(tenant, {row.execution_id for row in rows})
        if not erased:
            return rows
        for row in rows:
            if row.execution_id in erased:
                rejections.append(
                    {
                        "checkpoint_id": row.checkpoint_id,
                        "execution_id": row.execution_id,
                        "namespace": row.namespace,
                        "reason": ERASED_REASON,
                    }
                )
        return [row for row in rows if row.execution_id not in erased]

    # ------------------------------------------------------------------ erasure

    async def erase(self, request: Request) -> Response:
        """``POST …/checkpoints/erase``: tombstone an execution of the key's tenant, then drop it."""
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        if not tenant.can_erase:
            return _error(
                403,
                f"the key {tenant.key_id} may not erase; create one that may with "
                "`durability plane keys create DOMAIN PROJECT --can-erase`",
            )
        body = await _object_body(request)
        execution_id = body.get("execution_id")
        if not isinstance(execution_id, str) or not execution_id or "\x00" in execution_id:
            return _error(422, 'the body must be {"execution_id": "<non-empty id without NUL>"}')
        done = await run_in_threadpool(self.storage.erase, tenant, execution_id)
        return _json(
            {
                "execution_id": execution_id,
                "tombstone": done.tombstone,
                "erased_at": done.erased_at.isoformat(),
                "removed": done.removed,
                "already_erased": done.already_erased,
            }
        )

    # ------------------------------------------------------------------ reads

    async def checkpoints(self, request: Request) -> Response:
        """``GET …/checkpoints/{execution_id}[/latest]``, parsed from the raw (still encoded) path."""
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        raw = request.scope.get("raw_path") or request.url.path.encode()
        raw_path = raw.decode("latin-1").split("?", 1)[0]
        segments = raw_path[len("/public/v1/checkpoints/") :].split("/")
        execution_id = _segment(segments[0])
        if execution_id is None:
            return _error(404, "not found: the execution id is not valid percent-encoded UTF-8")
        if "\x00" in execution_id:  # no row can hold it (a Postgres text cannot)
            return _nothing_for(execution_id)
        if len(segments) == 2 and segments[1] == "latest":
            latest = self.storage.latest(tenant, execution_id)
            if latest is None:
                return _nothing_for(execution_id, erased=self._erased(tenant, execution_id))
            return _json(latest)
        if len(segments) != 1 or not execution_id or not self.history:
            return _error(404, "not found")
        try:
            items, cursor = self.storage.history(
                tenant, execution_id, limit=_limit(request), cursor=_cursor(request)
            )
        except ConfigError as exc:
            return _error(422, str(exc))
        if not items and cursor is None and self._erased(tenant, execution_id):
            return _nothing_for(execution_id, erased=True)
        return _json({"items": items, "next_cursor": cursor, "execution_id": execution_id})

    def _erased(self, tenant: Tenant, execution_id: str) -> bool:
        return bool(self.storage.erased(tenant, [execution_id]))

    async def digest(self, request: Request) -> Response:
        """``POST …/checkpoints/digest`` ``{"execution_ids": [...], "ids": false}``: per execution,
        how many rows the key's project holds and their ids' checksum (never a state).

        At most :data:`DIGEST_EXECUTIONS` executions a request; with ``ids`` at most one, and
        the answer lists its checkpoint ids. Anything else is refused with 422, naming it.
        """
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        body = await _object_body(request)
        executions, with_ids = body.get("execution_ids"), body.get("ids", False)
        limit = 1 if with_ids is True else DIGEST_EXECUTIONS
        if (
            not isinstance(executions, list)
            or not 1 <= len(executions) <= limit
            or not all(isinstance(e, str) and e and "\x00" not in e for e in executions)
            or not isinstance(with_ids, bool)
        ):
            return _error(
                422,
                f"execution_ids must be a list of 1 to {limit} non-empty execution ids (text "
                "without NUL), and ids true or false (with ids, one execution at a time)",
            )
        items = self.storage.digest(tenant, list(dict.fromkeys(executions)), with_ids=with_ids)
        return _json({"items": items})

    async def runs(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        try:
            items, cursor = self.storage.runs(
                tenant, limit=_limit(request), cursor=_cursor(request)
            )
        except ConfigError as exc:
            return _error(422, str(exc))
        return _json({"items": items, "next_cursor": cursor})


def _conflict_names(conflict: Conflict) -> dict[str, str]:
    return {
        "checkpoint_id": conflict.checkpoint_id,
        "execution_id": conflict.execution_id,
        "namespace": conflict.namespace,
    }


def _refused(status: int, named: dict[str, str], reason: str) -> Response:
    """A compatibility-mode refusal of the whole batch, naming its first offender."""
    return _error(
        status,
        f"checkpoint {named['checkpoint_id'][:200]} of execution {named['execution_id'][:200]}: {reason}",
        **named,
    )


def _nothing_for(execution_id: str, *, erased: bool = False) -> Response:
    """The plane's own "no checkpoint" answer: it echoes the execution id it looked up, which a
    router's 404 for a path it could not match never does (``erased``: it was erased here)."""
    if erased:
        return _error(
            404,
            "no checkpoint for this execution: it was erased",
            execution_id=execution_id,
            erased=True,
        )
    return _error(404, "no checkpoint for this execution", execution_id=execution_id)


def _segment(raw: str) -> str | None:
    """One percent-encoded path segment as text; ``None`` when it is not valid UTF-8."""
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


async def _object_body(request: Request) -> dict[str, Any]:
    """The body as a JSON object; anything else (empty, not JSON, an array) as ``{}``."""
    try:
        body = orjson.loads(await request.body() or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}


def _limit(request: Request) -> int:
    text = request.query_params.get("limit", "100")
    if not (text.isascii() and text.isdigit() and len(text) <= 4 and 1 <= int(text) <= 1000):
        raise ConfigError(f"limit={text[:20]!r} must be an integer from 1 to 1000")
    return int(text)


def _cursor(request: Request) -> str | None:
    cursor = request.query_params.get("cursor")
    if cursor is not None and (
        len(cursor) > _CURSOR_CHARS or not cursor.isascii() or not cursor.isprintable()
    ):
        raise ConfigError(
            f"cursor {cursor[:40]!r} is not one this plane issued; start from the first page"
        )
    return cursor


class _AnyPath(Convertor[str]):
    """Starlette's ``path`` convertor, newlines included (its ``.*`` stops at one)."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("durability_any", _AnyPath())


def create_app(
    storage: PlaneStorage | str = "sqlite:///durability-plane.db",
    *,
    compat: bool = False,
    history: bool = True,
    caps: PlaneCaps | None = None,
) -> Starlette:
    """The plane as an ASGI application over ``storage`` (a :class:`PlaneStorage` or a database URL).

    ``history=False`` serves only the latest checkpoint (a plain fastaiagent plane).
    """
    store = storage if isinstance(storage, PlaneStorage) else PlaneStorage(storage)
    plane = Plane(store, compat=compat, history=history, caps=caps)
    routes = [
        Route("/public/v1/auth/check", plane.auth_check, methods=["GET"]),
        Route("/public/v1/policy", plane.policy, methods=["GET"]),
        Route("/public/v1/governance/enroll", plane.enroll, methods=["POST"]),
        Route("/public/v1/sdk/agents", plane.register_agent, methods=["POST"]),
        Route("/public/v1/checkpoints/ingest", plane.ingest, methods=["POST"]),
        Route("/public/v1/checkpoints/erase", plane.erase, methods=["POST"]),
        Route("/public/v1/checkpoints/digest", plane.digest, methods=["POST"]),
        Route("/public/v1/checkpoints/{rest:durability_any}", plane.checkpoints, methods=["GET"]),
        Route("/public/v1/runs", plane.runs, methods=["GET"]),
    ]
    limit = Middleware(
        BodyLimit, max_bytes=plane.caps.body_bytes, advice="send fewer checkpoints per request"
    )
    app = Starlette(routes=routes, middleware=[limit])
    app.state.plane = plane
    return app


__all__ = ["Plane", "PlaneCaps", "create_app"]
