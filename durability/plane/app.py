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
=========================================================  ============================================

Ingest answers 201 ``{ingested, rejected, rejections}``: items over a cap are refused one by one
with the reason (``state_snapshot is N bytes, over the 1048576-byte cap``). In compatibility mode
(``compat=True``) the plane behaves as older planes do and refuses the whole batch instead, 413
for size and 422 for a column cap, naming the first offender (``checkpoint_id`` in the body).
With ``history=False`` the plane serves only ``…/latest`` and answers 404 on the history path,
as a plain fastaiagent plane does (a client then falls back to latest).

Execution ids are read from the raw request path and percent-decoded segment by segment, so an id
holding ``/``, ``?``, ``#`` or ``..`` addresses exactly that execution. The plane never runs agent
code: it stores and serves JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from durability._version import __version__
from durability.errors import ConfigError
from durability.plane.storage import PlaneStorage, Row, Tenant, order_micros

RESOURCE_TYPES = frozenset({"agent", "chain", "swarm", "supervisor"})
STATUSES = frozenset({"completed", "interrupted", "failed"})
SCOPES = ["checkpoint:write", "checkpoint:read", "agent:write"]
ENTITLEMENT = "connected_state_plane"


@dataclass(frozen=True, slots=True)
class PlaneCaps:
    """What the plane refuses, announced in ``auth/check`` as ``limits``.

    ``state_bytes`` is measured on the compact JSON of ``state_snapshot``; 1 MiB by default.
    """

    state_bytes: int = 1_048_576
    step_type_chars: int = 40
    agent_id_chars: int = 255
    chain_id_chars: int = 255
    node_id_chars: int = 1024
    body_bytes: int = 64 * 1024 * 1024

    def announced(self) -> dict[str, int]:
        return {
            "state_bytes": self.state_bytes,
            "step_type_chars": self.step_type_chars,
            "agent_id_chars": self.agent_id_chars,
        }


class _Refusal(Exception):
    """An item the plane refuses: ``status`` is what compat mode answers for it."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class _BadRequest(Exception):
    pass


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

    def tenant(self, request: Request) -> Tenant | None:
        return self.storage.authenticate(request.headers.get("x-api-key", ""))

    # ------------------------------------------------------------------ connect-time

    async def auth_check(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        return _json(
            {
                "domain_id": tenant.domain_id,
                "project_id": tenant.project_id,
                "scopes": SCOPES,
                "key_id": tenant.key_id,
                "entitlements": {ENTITLEMENT: tenant.entitled},
                "limits": self.caps.announced(),
                "features": {
                    "checkpoint_history": self.history,
                    "per_item_rejections": not self.compat,
                },
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
        body = await _body(request)
        fail_mode = body.get("fail_mode") if isinstance(body, dict) else None
        return _json(
            {
                "instance_id": str((body or {}).get("instance_id") or ""),
                "fail_mode": fail_mode or "open",
            }
        )

    async def register_agent(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        body = await _body(request)
        name = body.get("name") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name or len(name) > self.caps.agent_id_chars:
            return _error(
                422, f"an agent needs a name of 1 to {self.caps.agent_id_chars} characters"
            )
        return _json(self.storage.upsert_agent(tenant, name, body), 201)

    # ------------------------------------------------------------------ ingest

    async def ingest(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        if not tenant.entitled:
            return _error(403, f"the domain {tenant.domain_id!r} is not entitled to {ENTITLEMENT}")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.caps.body_bytes:
            return _error(
                413,
                f"the request body is {declared} bytes, over the {self.caps.body_bytes}-byte limit",
            )
        try:
            payload = orjson.loads(await request.body())
            items = payload.get("checkpoints") if isinstance(payload, dict) else None
            if not isinstance(items, list):
                raise _BadRequest('the body must be {"checkpoints": [item, …]}')
            rows: list[Row] = []
            rejections: list[dict[str, str]] = []
            for item in items:
                checkpoint_id = _ids(item)
                try:
                    rows.append(self.validate(item))
                except _Refusal as refusal:
                    if self.compat:
                        return _error(
                            refusal.status,
                            f"checkpoint {checkpoint_id}: {refusal.reason}",
                            checkpoint_id=checkpoint_id,
                        )
                    rejections.append({"checkpoint_id": checkpoint_id, "reason": refusal.reason})
        except orjson.JSONDecodeError:
            return _error(400, "the body is not JSON")
        except _BadRequest as exc:
            return _error(422, str(exc))
        stored, conflicts = self.storage.insert(tenant, rows)
        if conflicts and self.compat:
            checkpoint_id, reason = next(iter(conflicts.items()))
            return _error(409, f"checkpoint {checkpoint_id}: {reason}", checkpoint_id=checkpoint_id)
        rejections += [{"checkpoint_id": cid, "reason": why} for cid, why in conflicts.items()]
        return _json(
            {"ingested": stored, "rejected": len(rejections), "rejections": rejections}, 201
        )

    def validate(self, item: dict[str, Any]) -> Row:
        """Check one item (shape first, then caps) and turn it into a row."""
        caps = self.caps
        state = item.get("state_snapshot")
        if state is None:
            state = {}
        if not isinstance(state, dict):
            raise _Refusal("state_snapshot must be an object", 422)
        metadata = item.get("metadata")
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise _Refusal("metadata must be an object", 422)
        state_text = orjson.dumps(state)
        if len(state_text) > caps.state_bytes:
            raise _Refusal(
                f"state_snapshot is {len(state_text)} bytes, over the {caps.state_bytes}-byte cap",
                413,
            )
        texts = {}
        for name, limit in (
            ("step_type", caps.step_type_chars),
            ("agent_id", caps.agent_id_chars),
            ("chain_id", caps.chain_id_chars),
            ("node_id", caps.node_id_chars),
            ("parent_checkpoint_id", None),
            ("created_at", 64),
        ):
            value = item.get(name)
            if value is not None and not isinstance(value, str):
                raise _Refusal(f"{name} must be a string or null", 422)
            if value is not None and limit is not None and len(value) > limit:
                raise _Refusal(
                    f"{name} is {len(value)} characters, over the {limit}-character limit", 422
                )
            texts[name] = value
        resource_type = item.get("resource_type") or "chain"
        if resource_type not in RESOURCE_TYPES:
            raise _Refusal(
                f"resource_type {str(resource_type)[:40]!r} is not one of {', '.join(sorted(RESOURCE_TYPES))}",
                422,
            )
        status = item.get("status") or "completed"
        if status not in STATUSES:
            raise _Refusal(
                f"status {str(status)[:40]!r} is not one of {', '.join(sorted(STATUSES))}", 422
            )
        step_index = item.get("step_index")
        sequence = item.get("sequence")
        for name, number in (("step_index", step_index), ("sequence", sequence)):
            if number is not None and (
                not isinstance(number, int) or isinstance(number, bool) or abs(number) >= 2**63
            ):
                raise _Refusal(f"{name} must be an integer or null", 422)
        return Row(
            item["checkpoint_id"],
            item["execution_id"],
            {
                "checkpoint_id": item["checkpoint_id"],
                "execution_id": item["execution_id"],
                "resource_type": resource_type,
                "agent_id": texts["agent_id"],
                "chain_id": texts["chain_id"],
                "node_id": texts["node_id"] or "",
                "step_index": step_index,
                "step_type": texts["step_type"],
                "status": status,
                "parent_checkpoint_id": texts["parent_checkpoint_id"],
                "state_snapshot": state_text.decode(),
                "metadata": orjson.dumps(metadata).decode(),
                "created_at": texts["created_at"],
                "order_at": order_micros(texts["created_at"], None),
                "sequence": sequence,
            },
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
        if len(segments) == 2 and segments[1] == "latest":
            latest = self.storage.latest(tenant, unquote(segments[0], errors="surrogatepass"))
            if latest is None:
                return _error(404, "no checkpoint for this execution")
            return _json(latest)
        if len(segments) != 1 or not segments[0] or not self.history:
            return _error(404, "not found")
        try:
            limit = _limit(request)
            items, cursor = self.storage.history(
                tenant,
                unquote(segments[0], errors="surrogatepass"),
                limit=limit,
                cursor=request.query_params.get("cursor"),
            )
        except ConfigError as exc:
            return _error(422, str(exc))
        return _json({"items": items, "next_cursor": cursor})

    async def runs(self, request: Request) -> Response:
        tenant = self.tenant(request)
        if tenant is None:
            return _error(401, "invalid or revoked API key")
        try:
            items, cursor = self.storage.runs(
                tenant, limit=_limit(request), cursor=request.query_params.get("cursor")
            )
        except ConfigError as exc:
            return _error(422, str(exc))
        return _json({"items": items, "next_cursor": cursor})


def _ids(item: Any) -> str:
    if not isinstance(item, dict):
        raise _BadRequest("every checkpoint must be an object")
    checkpoint_id, execution_id = item.get("checkpoint_id"), item.get("execution_id")
    if (
        not isinstance(checkpoint_id, str)
        or not checkpoint_id
        or not isinstance(execution_id, str)
        or not execution_id
    ):
        raise _BadRequest(
            "every checkpoint needs a non-empty checkpoint_id and execution_id (strings)"
        )
    return checkpoint_id


async def _body(request: Request) -> Any:
    try:
        return orjson.loads(await request.body() or b"{}")
    except orjson.JSONDecodeError:
        return {}


def _limit(request: Request) -> int:
    text = request.query_params.get("limit", "100")
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise ConfigError(f"limit={text[:20]!r} must be an integer from 1 to 1000")
    return int(text)


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
        Route("/public/v1/checkpoints/{rest:path}", plane.checkpoints, methods=["GET"]),
        Route("/public/v1/runs", plane.runs, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.plane = plane
    return app


__all__ = ["Plane", "PlaneCaps", "create_app"]
