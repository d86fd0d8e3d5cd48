"""Checkpoint stores, chosen by URL scheme and imported only when used.

=====================================  ==========================================
URL                                    provider
=====================================  ==========================================
``memory://`` / ``memory://name``      in-process (a fresh store, or one per name)
``sqlite:///path.db``                  SQLite file, the embedded default
``postgresql+psycopg://…``             Postgres (``postgresql://`` works too)
``redis://…`` / ``rediss://…``         Redis 7, no modules
``fastaiagent+sqlite:///local.db``     a fastaiagent SDK store, read-only
``fastaiagent+postgresql://…``         (``?schema=``, default ``fastaiagent``)
``langgraph+sqlite:///checkpoints.db`` a LangGraph SqliteSaver file, read-only
``langgraph+postgresql://…``           a LangGraph PostgresSaver database, read-only
                                       (``?schema=``, default the search path);
                                       ``?writable=true``: swept and thinned in place
``archive:///dir``                     the archives a sweep wrote there, read-only
=====================================  ==========================================
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from durability._extras import missing_extra
from durability._util import redact_url
from durability.errors import ConfigError
from durability.stores.base import Capabilities, Store, ThreadPage

#: URL scheme (the part before ``://``, before any ``+driver``) → ``module:Class``.
PROVIDERS: dict[str, str] = {
    "memory": "durability.stores.memory:MemoryStore",
    "sqlite": "durability.stores.sql:SQLStore",
    "postgresql": "durability.stores.sql:SQLStore",
    "postgres": "durability.stores.sql:SQLStore",
    "redis": "durability.stores.redis:RedisStore",
    "rediss": "durability.stores.redis:RedisStore",
    "fastaiagent+sqlite": "durability.stores.foreign.fastaiagent:FastAIAgentStore",
    "fastaiagent+postgresql": "durability.stores.foreign.fastaiagent:FastAIAgentStore",
    "fastaiagent+postgres": "durability.stores.foreign.fastaiagent:FastAIAgentStore",
    "langgraph+sqlite": "durability.stores.foreign.langgraph:LangGraphStore",
    "langgraph+postgresql": "durability.stores.foreign.langgraph:LangGraphStore",
    "langgraph+postgres": "durability.stores.foreign.langgraph:LangGraphStore",
    "archive": "durability.archive.store:ArchiveStore",
}


def register_provider(scheme: str, target: str | type[Store]) -> None:
    """Open URLs of ``scheme`` (``mini`` for ``mini://…``) with a store class of one's own.

    ``target`` is the class, or ``"module:Class"`` to import it on first use. A scheme already
    registered is refused: a store never silently changes which provider a URL opens.
    """
    scheme = scheme.lower()
    if not scheme or "://" in scheme or scheme in PROVIDERS:
        raise ConfigError(
            f"cannot register the scheme {scheme!r}: it is empty, holds ://, or is taken "
            f"(registered: {', '.join(sorted(PROVIDERS))})"
        )
    if isinstance(target, str):
        PROVIDERS[scheme] = target
    else:
        _REGISTERED[f"{target.__module__}:{target.__qualname__}"] = target
        PROVIDERS[scheme] = f"{target.__module__}:{target.__qualname__}"


#: Classes registered directly (not by import path), by their ``module:Class`` name.
_REGISTERED: dict[str, type[Store]] = {}


def open_store(url: str, **options: Any) -> Store:
    """Open the store at ``url``; ``options`` go to the provider (``settings``, ``clock``, …).

    Nothing is read or written until the store is first used: the format generation is
    checked then: a deployment that never uses its store never runs the check.
    """
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            f"cannot open a store at {url!r}: give a URL such as sqlite:///durability.db, "
            "memory://, postgresql+psycopg://user@host/db or redis://localhost:6379/0"
        )
    scheme = url.split("://", 1)[0].lower()
    target = PROVIDERS.get(scheme) or PROVIDERS.get(scheme.split("+", 1)[0])
    if target is None:
        raise ConfigError(
            f"cannot open a store at {redact_url(url)}: unknown scheme {scheme!r}; "
            f"use one of {', '.join(sorted(PROVIDERS))}"
        )
    module_name, _, class_name = target.partition(":")
    try:
        cls: Any = _REGISTERED.get(target) or getattr(
            importlib.import_module(module_name), class_name
        )
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, f"a {scheme} store") from exc
    accepted = _options_of(cls)
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ConfigError(
            f"cannot open {redact_url(url)}: the {scheme} provider takes no option "
            f"{', '.join(map(repr, unknown))}; its options are {', '.join(sorted(accepted))}"
        )
    try:
        store: Store = cls(url, **options)
    except ModuleNotFoundError as exc:  # a driver the provider loads when it connects
        raise missing_extra(exc, f"a {scheme} store") from exc
    return store


def _options_of(cls: type) -> set[str]:
    """The keyword options a provider takes: its constructor's and, through ``**kwargs``, its
    bases' (``settings`` and ``clock`` come from :class:`Store`)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names |= {
            p.name
            for p in params
            if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in ("self", "url")
        }
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names


__all__ = ["PROVIDERS", "Capabilities", "Store", "ThreadPage", "open_store", "register_provider"]
