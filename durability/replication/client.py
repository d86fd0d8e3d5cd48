"""The plane client: every HTTP call to a checkpoint plane, and the one place errors are mapped.

:class:`PlaneClient` speaks the fastaiagent public API (reference ``fastaiagent-wire.md``): the
same headers (``X-API-Key``, ``Content-Type``, ``User-Agent``, ``X-FAA-Protocol``), the ingest
door, latest and history reads, agent registration and the connect-time auth check. Every
transport failure (connect, timeouts, dropped connections, protocol errors) is mapped to a
:class:`~durability.errors.ReplicationError` in :meth:`PlaneClient._send`, and every ingest answer
is classified in :func:`classify_ingest` — nothing else in the package looks at a status code.

The API key is held privately: it is sent in one header and never appears in a repr, a log line
or an exception message. Ids in paths are percent-encoded as one segment (a ``/``, ``?``, ``#``
or ``..`` in an execution id never changes the path).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

import httpx
import orjson

from durability._version import __version__
from durability.errors import ConfigError, ErasedOnPlane, PlaneRoutingError, ReplicationError
from durability.replication.wire import ItemRef

logger = logging.getLogger("durability.replication")

#: The plane wire version announced in ``X-FAA-Protocol`` (the fastaiagent 1.94 protocol).
PROTOCOL = "v1.11"
PROTOCOL_HEADER = "X-FAA-Protocol"

#: The statuses that mean "this payload is unacceptable": re-sending it can only fail again.
PAYLOAD_REFUSALS = frozenset({400, 409, 413, 422})

#: Reasons are kept to this many characters, as the fastaiagent SDK keeps them.
REASON_MAX = 300

INGEST_PATH = "/public/v1/checkpoints/ingest"
ERASE_PATH = "/public/v1/checkpoints/erase"

Outcome = Literal["ok", "refused", "buffered"]


@dataclass(frozen=True, slots=True)
class IngestAnswer:
    """What one ingest POST came to.

    * ``ok``: a 2xx; ``rejections`` maps the items the plane refused one by one (their
      :data:`~durability.replication.wire.ItemRef`) to the reason to record (``plane rejected: …``).
    * ``refused``: a payload refusal (400, 409, 413, 422) of the whole batch; ``reason`` is
      ``HTTP <code> from /checkpoints/ingest: <detail>``; ``named`` holds the items the plane's
      answer names as offenders (this project's plane names the first one).
    * ``buffered``: anything else (401, 403, 404, 408, 429, 3xx, 5xx, a transport error); the
      rows stay in the outbox. ``retry_after`` is the plane's ``Retry-After`` in seconds, if any.
    """

    outcome: Outcome
    status: int | None
    reason: str = ""
    rejections: dict[ItemRef, str] = field(default_factory=dict)
    named: tuple[ItemRef, ...] = ()
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class EraseAnswer:
    """What one erase request came to.

    * ``erased``: a 2xx; ``body`` is the plane's answer (``removed``, ``tombstone``,
      ``erased_at``, ``already_erased``).
    * ``no_route``: 404 or 405 on the erase path: the plane has no erase route, so its copy
      remains (there is nothing to wait for).
    * ``buffered``: anything else (401, 403 — a key without the erase permission —, 408, 429,
      5xx, a transport error): the request stays queued and is sent again, as rows are.
    """

    outcome: Literal["erased", "no_route", "buffered"]
    status: int | None
    reason: str = ""
    body: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """One page of a thread's history on the plane, oldest first; ``cursor`` is ``None`` at the end."""

    items: list[dict[str, Any]]
    cursor: str | None


def normalize_target(target: str) -> str:
    """The plane URL without trailing slashes; an explicit ``http://`` or ``https://`` is required."""
    text = (target or "").strip().rstrip("/")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme not in ("http", "https"):
        raise ConfigError(
            f"cannot use the plane target {text[:200]!r}: give an explicit http:// or https:// URL, "
            "e.g. https://plane.example.com (http:// only for loopback development)"
        )
    return text


def path_segment(value: str) -> str:
    """``value`` percent-encoded as one path segment (``.`` too, so ``..`` is never a dot-segment)."""
    return quote(value, safe="").replace(".", "%2E")


def classify_ingest(response: httpx.Response, batch: Collection[ItemRef]) -> IngestAnswer:
    """Classify the answer to an ingest POST (the one place ingest status codes are read).

    ``batch`` holds the items the request carried: a plane's naming of an item is matched
    against them (by checkpoint id, and by execution id and namespace when the plane gives
    them), and a name matching none is ignored.
    """
    code = response.status_code
    if 200 <= code < 300:
        return IngestAnswer("ok", code, rejections=_rejections(response, _Refs(batch)))
    detail = (response.text or "").strip()[:REASON_MAX]
    reason = f"HTTP {code} from /checkpoints/ingest: {detail or '(no body)'}"[:REASON_MAX]
    if code in PAYLOAD_REFUSALS:
        return IngestAnswer("refused", code, reason, named=_named(response, _Refs(batch)))
    return IngestAnswer("buffered", code, reason, retry_after=_retry_after(response))


class _Refs:
    """A batch's items, found by how a plane names them."""

    def __init__(self, batch: Collection[ItemRef]) -> None:
        self.by_id: dict[str, list[ItemRef]] = {}
        for ref in batch:
            self.by_id.setdefault(ref[0], []).append(ref)

    def matching(self, named: Any) -> list[ItemRef]:
        """The items a plane's ``{checkpoint_id[, execution_id][, namespace]}`` names."""
        if not isinstance(named, dict) or not isinstance(named.get("checkpoint_id"), str):
            return []
        execution_id, namespace = named.get("execution_id"), named.get("namespace")
        return [
            ref
            for ref in self.by_id.get(named["checkpoint_id"], ())
            if (not isinstance(execution_id, str) or ref[1] == execution_id)
            and (not isinstance(namespace, str) or ref[2] == namespace)
        ]


#: Answers to a read of one thread that mean its path was not routed to the plane's handler
#: (404 unless the plane itself said it holds nothing; see :func:`_says_nothing`).
UNROUTED = frozenset({404, 414, 431})

#: What to do when a thread's path does not reach the plane (a :class:`PlaneRoutingError`).
ROUTING_FIX = (
    "let every proxy and router in front of the plane pass percent-encoded path segments "
    "unchanged and raise their request-line and header limits (uvicorn: "
    "h11_max_incomplete_event_size; nginx: large_client_header_buffers), then restore again"
)

#: Longest id a plain 404 is trusted for: past it, a proxy's limits may be what answered.
PLAIN_ID_CHARS = 1024


def plainly_routable(thread_id: str) -> bool:
    """Whether every router passes this id's path segment unchanged: printable ASCII without
    ``/ \\ ? # %``, not a dot segment, at most :data:`PLAIN_ID_CHARS` characters."""
    return (
        len(thread_id) <= PLAIN_ID_CHARS
        and thread_id.isascii()
        and thread_id.isprintable()
        and not any(c in thread_id for c in "/\\?#%")
        and thread_id not in (".", "..")
    )


def _says_nothing(response: httpx.Response, thread_id: str) -> bool:
    """Whether a 404 is the plane saying it holds nothing for ``thread_id``: it echoes that id,
    or (a plane that echoes nothing) the id is one no router could have mangled."""
    body = _json(response)
    if isinstance(body, dict) and "execution_id" in body:
        return bool(body["execution_id"] == thread_id)
    return plainly_routable(thread_id)


def _json(response: httpx.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None


def _rejections(response: httpx.Response, refs: _Refs) -> dict[ItemRef, str]:
    """Per-item refusals in a 2xx body; names outside the batch are ignored (a plane answering
    about rows it was not sent must not quarantine them)."""
    body = _json(response)
    out: dict[ItemRef, str] = {}
    if not isinstance(body, dict) or not isinstance(body.get("rejections"), list):
        return out
    for item in body["rejections"]:
        for ref in refs.matching(item):
            why = str(item.get("reason") or "no reason given")
            out[ref] = f"plane rejected: {why}"[:REASON_MAX]
    return out


def _named(response: httpx.Response, refs: _Refs) -> tuple[ItemRef, ...]:
    """The offenders a refusal names: ``checkpoint_id`` (with ``execution_id`` and ``namespace``
    when given) or a ``checkpoint_ids`` list."""
    body = _json(response)
    if not isinstance(body, dict):
        return ()
    names = body.get("checkpoint_ids")
    if isinstance(names, list):
        return tuple(ref for n in names for ref in refs.matching({"checkpoint_id": n}))
    return tuple(refs.matching(body))


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None


class PlaneClient:
    """HTTP access to one plane with one API key.

    Args:
        target: The plane's base URL (``https://…``; a path prefix is kept).
        api_key: The key the plane issued (scoped to a domain and project).
        http: An ``httpx.Client`` to send through (tests inject one); by default the client
            makes its own, with ``timeout`` seconds for connect, read, write and pool, and does
            not follow redirects (a 3xx leaves rows buffered).
        timeout: Seconds per phase of a request.
    """

    def __init__(
        self,
        target: str,
        api_key: str,
        *,
        http: httpx.Client | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(api_key, str) or not api_key.strip():
            raise ConfigError(
                "cannot connect to a plane without an API key; create one with "
                "`durability plane keys create` (or take it from your plane's console)"
            )
        self.target = normalize_target(target)
        self.__key = api_key
        self._owns_http = http is None
        self._http = http if http is not None else httpx.Client(timeout=timeout)

    def __repr__(self) -> str:
        return f"<PlaneClient {self.target}>"

    @property
    def headers(self) -> dict[str, str]:
        """The headers of every call (the key included: never log this)."""
        return {
            "X-API-Key": self.__key,
            "Content-Type": "application/json",
            "User-Agent": f"durability/{__version__}",
            PROTOCOL_HEADER: PROTOCOL,
        }

    def holds_key(self, api_key: str) -> bool:
        """Whether this client sends ``api_key`` (a constant-time comparison; the key is never
        shown)."""
        return hmac.compare_digest(self.__key.encode(), api_key.encode())

    def close(self) -> None:
        """Close the HTTP client this object made (an injected one is left to its owner)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> PlaneClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport (one place)

    def _send(
        self,
        method: str,
        path: str,
        *,
        action: str,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
    ) -> httpx.Response:
        """Send one request; every failure to get an answer becomes a retryable ``ReplicationError``.

        Besides transport errors that includes whatever else the HTTP client raises: a closed
        or broken (e.g. injected) ``httpx.Client`` raises ``RuntimeError``, and that must leave
        rows buffered like a plane that is down, not escape the drain.
        """
        try:
            return self._http.request(
                method,
                self.target + path,
                content=content,
                params=params,
                headers=self.headers,
                follow_redirects=False,
            )
        except httpx.HTTPError as exc:
            raise ReplicationError(
                f"cannot {action}: the plane {self.target} did not answer "
                f"({type(exc).__name__}); the rows stay buffered and are retried",
                retryable=True,
                hint="check that the plane is running and reachable",
            ) from None
        except Exception as exc:
            raise ReplicationError(
                f"cannot {action}: the HTTP client failed ({type(exc).__name__}: "
                f"{str(exc)[:200]}); the rows stay buffered and are retried",
                retryable=True,
                hint="check the httpx.Client given to connect(): it may be closed",
            ) from None

    # ------------------------------------------------------------------ calls

    def ingest(self, body: bytes, batch: Collection[ItemRef]) -> IngestAnswer:
        """POST a prepared ``{"checkpoints": […]}`` body to the ingest door and classify the answer."""
        try:
            response = self._send("POST", INGEST_PATH, action="send checkpoints", content=body)
        except ReplicationError as exc:
            return IngestAnswer("buffered", None, f"transport error: {exc}"[:REASON_MAX])
        return classify_ingest(response, batch)

    def erase(self, thread_id: str) -> EraseAnswer:
        """``POST /public/v1/checkpoints/erase``: ask the plane to erase its copy of the thread."""
        body = orjson.dumps({"execution_id": thread_id})
        try:
            response = self._send("POST", ERASE_PATH, action="erase a thread", content=body)
        except ReplicationError as exc:
            return EraseAnswer("buffered", None, f"transport error: {exc}"[:REASON_MAX])
        if response.is_success:
            answer = _json(response)
            return EraseAnswer(
                "erased", response.status_code, body=answer if isinstance(answer, dict) else {}
            )
        detail = (response.text or "").strip()[:200]
        reason = f"HTTP {response.status_code} from {ERASE_PATH}: {detail}"[:REASON_MAX]
        if response.status_code in (404, 405):
            return EraseAnswer("no_route", response.status_code, reason)
        return EraseAnswer("buffered", response.status_code, reason)

    def auth_check(self) -> dict[str, Any]:
        """``GET /public/v1/auth/check``: the key's domain, project, scopes and the plane's limits.

        Raises:
            ReplicationError: ``retryable=False`` when the plane refuses the key (401/403);
                ``retryable=True`` when it cannot be reached or answers otherwise.
        """
        response = self._send("GET", "/public/v1/auth/check", action="check the API key")
        if response.status_code in (401, 403):
            raise ReplicationError(
                f"cannot connect to {self.target}: the plane refused the API key "
                f"(HTTP {response.status_code}); check the key, its domain and its project",
                retryable=False,
                hint="create a key with `durability plane keys create`",
            )
        if response.status_code != 200:
            raise ReplicationError(
                f"cannot check the API key at {self.target}: HTTP {response.status_code}",
                retryable=True,
            )
        body = _json(response)
        return body if isinstance(body, dict) else {}

    def identify(self) -> dict[str, Any] | IngestAnswer:
        """The auth check's answer, or, when there is none to be had, why, as a buffered
        :class:`IngestAnswer` (what a drain records on the rows it could not send)."""
        try:
            response = self._send("GET", "/public/v1/auth/check", action="check the API key")
        except ReplicationError as exc:
            return IngestAnswer("buffered", None, f"transport error: {exc}"[:REASON_MAX])
        code = response.status_code
        if code != 200:
            detail = (response.text or "").strip() or "(no body)"
            reason = f"HTTP {code} from /auth/check: {detail}"[:REASON_MAX]
            return IngestAnswer("buffered", code, reason, retry_after=_retry_after(response))
        body = _json(response)
        return body if isinstance(body, dict) else {}

    def register_agent(self, name: str, definition: dict[str, Any] | None = None) -> str:
        """``POST /public/v1/sdk/agents`` (an upsert by name): the agent's plane id."""
        payload = {"name": name, **(definition or {})}
        response = self._send(
            "POST",
            "/public/v1/sdk/agents",
            action="register an agent",
            content=orjson.dumps(payload),
        )
        body = _json(response)
        agent_id = None
        if response.is_success and isinstance(body, dict):
            agent_id = body.get("id") or body.get("agent_id")
        if not isinstance(agent_id, str) or not agent_id:
            raise ReplicationError(
                f"cannot register agent {name[:80]!r} at {self.target}: HTTP {response.status_code}; "
                "rows keep sending the agent's name as agent_id",
                retryable=response.status_code >= 500,
            )
        return agent_id

    def latest(self, thread_id: str) -> dict[str, Any] | None:
        """``GET /public/v1/checkpoints/{id}/latest``: the plane's latest item, or ``None`` when
        the plane holds nothing for the thread.

        A 404 means "nothing" only when it is the plane's own answer: one that names the
        execution it looked up (this project's plane does), or a plain 404 for an id no router
        mangles. Otherwise, and on a 414 or 431, a router or proxy could not route the id.

        Raises:
            PlaneRoutingError: the answer came from something in front of the plane that could
                not route the id, so whether the plane holds the thread is unknown.
        """
        response = self._send(
            "GET",
            f"/public/v1/checkpoints/{path_segment(thread_id)}/latest",
            action="read the latest checkpoint from the plane",
        )
        if response.status_code == 404 and _says_nothing(response, thread_id):
            self._refuse_erased(thread_id, response)
            return None
        if response.status_code in UNROUTED:
            raise self._unrouted(thread_id, response)
        body = self._checked(response, "read the latest checkpoint")
        if not isinstance(body, dict):
            raise ReplicationError(
                f"cannot read the latest checkpoint from {self.target}: the answer is not an object",
                retryable=False,
            )
        return body

    def history(
        self, thread_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> HistoryPage | None:
        """One page of ``GET /public/v1/checkpoints/{id}`` (oldest first).

        Returns ``None`` when the plane answers 404 on that path: it does not serve history
        (an older or foreign plane), and a caller falls back to :meth:`latest`. This project's
        plane answers an unknown thread with an empty page, never a 404.
        """
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        response = self._send(
            "GET",
            f"/public/v1/checkpoints/{path_segment(thread_id)}",
            action="read a thread's history from the plane",
            params=params,
        )
        if response.status_code in UNROUTED - {404}:
            raise self._unrouted(thread_id, response)
        if response.status_code == 404:
            self._refuse_erased(thread_id, response)
            return None
        body = self._checked(response, "read a thread's history")
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise ReplicationError(
                f"cannot read a thread's history from {self.target}: unexpected answer shape",
                retryable=False,
            )
        next_cursor = body.get("next_cursor")
        return HistoryPage(body["items"], next_cursor if isinstance(next_cursor, str) else None)

    def iter_history(
        self, thread_id: str, *, page_size: int = 500
    ) -> Iterator[dict[str, Any]] | None:
        """Every history item of the thread, page by page; ``None`` when history is not served."""
        first = self.history(thread_id, limit=page_size)
        if first is None:
            return None

        def pages(page: HistoryPage) -> Iterator[dict[str, Any]]:
            while True:
                yield from page.items
                if page.cursor is None:
                    return
                nxt = self.history(thread_id, limit=page_size, cursor=page.cursor)
                if nxt is None:
                    return
                page = nxt

        return pages(first)

    def supports_history(self) -> bool:
        """Whether the plane serves history (a 404 on the history path means it does not)."""
        return self.history("durability-history-probe", limit=1) is not None

    def digest(self, execution_ids: Sequence[str], *, ids: bool = False) -> list[dict[str, Any]]:
        """``POST /public/v1/checkpoints/digest``: per execution, the count and checksum of the
        rows the plane holds (``ids``: one execution, its checkpoint ids too); never a state."""
        body = orjson.dumps({"execution_ids": list(execution_ids), "ids": ids})
        response = self._send(
            "POST",
            "/public/v1/checkpoints/digest",
            action="read the replica's digest",
            content=body,
        )
        answer = self._checked(response, "read the replica's digest")
        items = answer.get("items") if isinstance(answer, dict) else None
        return items if isinstance(items, list) else []

    def runs(self, *, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        """One page of ``GET /public/v1/runs`` (fleet run health)."""
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        response = self._send("GET", "/public/v1/runs", action="read run health", params=params)
        body = self._checked(response, "read run health")
        return body if isinstance(body, dict) else {}

    def _refuse_erased(self, thread_id: str, response: httpx.Response) -> None:
        """Raise :class:`ErasedOnPlane` when the plane's 404 says it erased the thread."""
        body = _json(response)
        if isinstance(body, dict) and body.get("erased") is True:
            raise ErasedOnPlane(
                f"cannot restore thread {thread_id[:80]!r} from {self.target}: the plane erased "
                "it, and an erased thread is never restored; start a new thread instead"
            )

    def _unrouted(self, thread_id: str, response: httpx.Response) -> PlaneRoutingError:
        detail = (response.text or "").strip()[:120] or "(no body)"
        return PlaneRoutingError(
            f"cannot tell whether the plane {self.target} holds thread {thread_id[:80]!r}: the "
            f"path naming it got HTTP {response.status_code} {detail}, which is not the plane's "
            "own answer (that names the execution it looked up), so a router or proxy in front "
            "of it could not route the id (a newline, '/', '%', '..' or a long id are the usual "
            f"causes); nothing was restored. Fix: {ROUTING_FIX}",
            retryable=False,
            hint=ROUTING_FIX,
        )

    def _checked(self, response: httpx.Response, action: str) -> Any:
        if not response.is_success:
            raise ReplicationError(
                f"cannot {action} from {self.target}: HTTP {response.status_code} "
                f"{(response.text or '').strip()[:200]}",
                retryable=response.status_code >= 500 or response.status_code in (408, 429),
            )
        return _json(response)
