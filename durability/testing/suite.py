"""The conformance suite's frame: store targets, the registry of checks, and small helpers.

A check is a plain function taking a :class:`StoreTarget` and raising ``AssertionError`` on
failure. A check that needs something a target may lack (another process, a server whose
connections can be dropped, a store that can park or keeps an outbox) says so with
:func:`requires`; :func:`not_applicable` tells a runner why it does not apply, so the runner
can report it as skipped rather than passed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.util import find_spec
from typing import Any

from durability.model import Checkpoint, PendingWrite
from durability.settings import Settings
from durability.stores import Store, open_store

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@dataclass
class StoreTarget:
    """One isolated store location, and how to open handles on it."""

    url: str
    options: dict[str, Any] = field(default_factory=dict)
    cross_process: bool = False
    #: Drops every server connection the target's stores hold (``pg_terminate_backend``,
    #: ``CLIENT KILL``); ``None`` where there is no server to lose.
    kill_connections: Callable[[], object] | None = None

    def open(self, **overrides: Any) -> Store:
        """Open another handle on this location (``overrides`` win over ``options``)."""
        options = {**self.options, **overrides}
        options.setdefault("settings", Settings())
        return open_store(self.url, **options)


Check = Callable[[StoreTarget], None]
CHECKS: list[Check] = []

#: What a check may need, and how to tell whether a target (and a store opened on it) has it.
_NEEDS: dict[str, Callable[[StoreTarget, Store], bool]] = {
    "cross_process": lambda target, _store: target.cross_process,
    "kill_connections": lambda target, _store: target.kill_connections is not None,
    "ledger": lambda _target, store: store.ledger is not None,
    "can_park": lambda _target, store: store.capabilities.can_park,
    "outbox": lambda _target, store: store.outbox is not None,
    "tombstones": lambda _target, store: store.tombstones is not None,
    # The encryption checks need the ``crypto`` extra, which a core install lacks.
    "crypto": lambda _target, _store: find_spec("cryptography") is not None,
}


def check(fn: Check) -> Check:
    """Register a conformance check."""
    CHECKS.append(fn)
    return fn


def requires(*needs: str) -> Callable[[Check], Check]:
    """Mark a check as needing ``needs`` (any of ``cross_process``, ``kill_connections``,
    ``ledger``, ``can_park``, ``outbox``, ``tombstones``, ``crypto``)."""
    unknown = set(needs) - set(_NEEDS)
    if unknown:
        raise ValueError(f"unknown needs {sorted(unknown)}; use some of {sorted(_NEEDS)}")

    def mark(fn: Check) -> Check:
        fn.requires = needs  # type: ignore[attr-defined]
        return fn

    return mark


def not_applicable(fn: Check, target: StoreTarget) -> str | None:
    """Why ``fn`` does not apply to ``target`` (``None``: it does)."""
    needs: tuple[str, ...] = getattr(fn, "requires", ())
    if not needs:
        return None
    with target.open() as store:
        lacking = [need for need in needs if not _NEEDS[need](target, store)]
        provider = store.provider or type(store).__name__
    return f"the {provider} target lacks {', '.join(lacking)}" if lacking else None


def raises(
    kind: type[BaseException], fn: Callable[[], object], *, contains: str = ""
) -> BaseException:
    """Assert ``fn()`` raises ``kind`` whose message contains ``contains``; return it."""
    try:
        fn()
    except kind as exc:  # a plain helper: the suite runs without pytest too
        assert contains in str(exc), f"{kind.__name__} message {str(exc)!r} lacks {contains!r}"  # noqa: PT017
        return exc
    raise AssertionError(f"expected {kind.__name__}")


def sample(thread_id: str, n: int = 0, **fields: Any) -> Checkpoint:
    """A small checkpoint of step ``n`` in ``thread_id``."""
    fields.setdefault("node_id", f"step-{n}")
    return Checkpoint(thread_id=thread_id, step=n, state={"n": n}, **fields)


def write_for(cp: Checkpoint, value: Any = 1) -> PendingWrite:
    """One pending write (task ``t``, channel ``c``) against the stored checkpoint ``cp``."""
    return PendingWrite(
        thread_id=cp.thread_id,
        namespace=cp.namespace,
        checkpoint_id=cp.checkpoint_id,
        task_id="t",
        idx=0,
        channel="c",
        value=value,
    )


def in_threads(
    fn: Callable[..., None], calls: Iterable[tuple[Any, ...]], timeout: float | None = None
) -> None:
    """Run ``fn(*args)`` for each ``args`` of ``calls``, each on a thread of its own, all at
    once; return when every one has ended (or ``timeout`` seconds passed for each)."""
    workers = [threading.Thread(target=fn, args=args) for args in calls]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout)


def assert_writers_ordered(
    history: list[Checkpoint], prefix: str, writers: int, each: int
) -> list[int]:
    """``history`` holds ``writers`` × ``each`` checkpoints with unique, increasing seqs, and
    writer ``w``'s node ids ``{prefix}{w}-{n}`` in the order it wrote them; returns the seqs."""
    assert len(history) == writers * each
    seqs = seqs_of(history)
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == writers * each
    for w in range(writers):
        mine = [c.node_id for c in history if c.node_id.startswith(f"{prefix}{w}-")]
        assert mine == [f"{prefix}{w}-{n}" for n in range(each)], "a writer's order was not kept"
    return seqs


def seqs_of(checkpoints: list[Checkpoint]) -> list[int]:
    """The stored checkpoints' seqs, asserting the store filled every one."""
    seqs = [c.seq for c in checkpoints]
    assert None not in seqs, "a stored checkpoint has no seq"
    return [s for s in seqs if s is not None]
