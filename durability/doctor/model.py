"""The doctor's vocabulary: a :class:`Check`, the :class:`Problem` it finds, the
:class:`Context` every check reads through, and the :class:`Diagnosis` of a whole store."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from durability._util import redact_url

if TYPE_CHECKING:
    from durability.doctor.replica import Replica
    from durability.stores.base import Store
    from durability.stores.scans import SweepColumns

#: Severities, worst first: ``error`` (a read, resume or restore can go wrong), ``warning``
#: (stale records that block or leak), ``info`` (the sweep's pending work: worth knowing, not a
#: break; a store with only ``info`` findings is whole).
SEVERITIES = ("error", "warning", "info")

#: The columns of a problem, in order (the frame :func:`durability.frames.problems` has them).
PROBLEM_FIELDS = ("check", "severity", "thread_id", "rows", "detail", "fix")

#: How many ids a problem's ``detail`` names before it says "and N more".
NAMED = 5


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding: which check, how bad, which thread, how many rows, what, and the fix.

    ``fix`` is the command that repairs it (``durability doctor URL --fix`` for the safe
    repairs), or ``None`` where no command can (the rows are gone). ``keys`` are the rows
    involved (ids, or Redis index members), what a repair acts on; a store-wide problem has
    ``thread_id=None``.
    """

    check: str
    severity: str
    thread_id: str | None
    rows: int
    detail: str
    fix: str | None
    keys: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The documented columns (``keys`` left out: they may be long)."""
        return {name: getattr(self, name) for name in PROBLEM_FIELDS}


@dataclass(frozen=True)
class Check:
    """One invariant: its name, severity, what it means, the fix and how it looks.

    ``run`` yields ``(thread_id, keys, detail)`` for each break; :meth:`problem` makes the
    :class:`Problem` so a check's severity and fix are written once, here. ``applies`` says
    whether the store can break the invariant at all (a store without parks has no park to
    check; ``unless`` says why not). ``repair`` names the safe repair ``--fix`` applies (``None``: report only).
    ``count`` counts the findings in the store without listing them, for an ``info`` check
    whose listing :attr:`Context.info_limit` cuts short (``None``: the rest are counted as
    ``run`` yields them). A check that reads every row reads a sample instead when the doctor
    is asked for one (:attr:`Context.sample`), and says so in :attr:`Context.samples`.
    """

    name: str
    severity: str
    summary: str
    run: Callable[[Context], Iterable[tuple[str | None, Sequence[Any], str]]]
    fix: str | None = None
    repair: str | None = None
    applies: Callable[[Context], bool] = field(default=lambda _ctx: True)
    #: Why the check is skipped where ``applies`` says no.
    unless: str = "the store keeps none"
    count: Callable[[Context], int] | None = None

    def problem(
        self, ctx: Context, thread_id: str | None, keys: Sequence[Any], detail: str
    ) -> Problem:
        """A :class:`Problem` of this check (its fix command filled with the store's URL)."""
        thread = shlex.quote(thread_id) if thread_id is not None else "THREAD"
        fix = self.fix.format(url=ctx.where, thread=thread) if self.fix else None
        return Problem(self.name, self.severity, thread_id, len(keys), detail, fix, tuple(keys))


@dataclass
class Context:
    """What every check reads: the store, the time, the slack it allows, and shared reads.

    ``grace`` spares what a run in progress leaves for a moment (a run records its ledger entry
    before its first checkpoint; default the runner's lease time-to-live). ``overdue`` is how
    long past due a finished mark may wait for the sweep before it is reported.
    """

    store: Store
    now: datetime
    grace: timedelta
    overdue: timedelta
    #: The plane to compare with (``--plane``), or ``None``.
    replica: Replica | None = None
    #: How many findings of each ``info`` check are listed (``None``: all); the rest are counted.
    info_limit: int | None = None
    #: The checks that read every row read about this many picked at random instead (threads,
    #: records), in a store holding more (``None``: every one).
    sample: int | None = None
    #: How many threads the store holds, when already counted (a sample does not count again).
    thread_count: int | None = None
    #: What each check that read a sample read: ``(read, of, what)`` (``what`` names the unit).
    samples: dict[str, tuple[int, int, str]] = field(default_factory=dict)

    @cached_property
    def sampling(self) -> tuple[list[str], int] | None:
        """The threads a sampled check reads and how many the store holds; ``None``: every
        thread (no ``sample`` asked, or the store holds no more threads than it)."""
        if self.sample is None:
            return None
        total = self.thread_count
        if total is None:
            total = sum(self.store.scans.owner_groups()["threads"])
        if total <= self.sample:
            return None
        picked = {address[0] for address in self.store.scans.sample_checkpoints(self.sample)}
        return sorted(picked), total

    @property
    def picked(self) -> list[str] | None:
        """The threads a sampled check reads (``None``: every thread)."""
        return None if self.sampling is None else self.sampling[0]

    @cached_property
    def where(self) -> str:
        """The store's URL with any password hidden (what a fix command names; once a run)."""
        return redact_url(self.store.url)

    @cached_property
    def threads(self) -> SweepColumns:
        """Every thread the store knows, as the sweep reads them (one read, shared)."""
        return self.store.scans.sweep_columns()


@dataclass(frozen=True)
class Diagnosis:
    """What the doctor found in one store: the problems, worst first, and which checks ran."""

    store: str
    now: datetime
    problems: list[Problem]
    checks: list[str]
    skipped: dict[str, str]
    #: The ``info`` checks that found more than ``info_limit``: how many each found in all
    #: (``problems`` lists the first ``info_limit`` of them).
    counted: dict[str, int] = field(default_factory=dict)
    #: The checks that read a sample: ``(read, of, what)``, e.g. ``(1992, 1000000, "threads")``.
    sampled: dict[str, tuple[int, int, str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Whether the store is whole: nothing of severity ``error`` or ``warning`` (``info``
        notes the sweep's pending work, which a store between sweeps always has)."""
        return all(p.severity == "info" for p in self.problems)

    def counts(self) -> dict[str, int]:
        """How many problems of each severity, those counted but not listed included."""
        found = {s: sum(p.severity == s for p in self.problems) for s in SEVERITIES}
        listed = Counter(p.check for p in self.problems)
        found["info"] += sum(total - listed[check] for check, total in self.counted.items())
        return found

    def to_dict(self) -> dict[str, Any]:
        """As ``durability doctor --json`` prints it."""
        return {
            "store": self.store,
            "now": self.now.isoformat(),
            "clean": self.clean,
            "counts": self.counts(),
            "checks": self.checks,
            "skipped": self.skipped,
            "counted": self.counted,
            "sampled": {check: list(read) for check, read in self.sampled.items()},
            "problems": [p.to_dict() for p in self.problems],
        }


def named(ids: Sequence[Any]) -> str:
    """The first few ids, then how many more (for a problem's ``detail``)."""
    shown = ", ".join(repr(str(i)[:80]) for i in ids[:NAMED])
    more = len(ids) - NAMED
    return shown + (f" and {more} more" if more > 0 else "")
