"""Benchmark durability.codec against LangGraph's JsonPlusSerializer, side by side.

Run with ``.venv/bin/python benchmarks/bench_codec.py``. Two states are built
deterministically: a rich ~2 KB state (datetime, Decimal, UUIDs, a set, bytes, a pydantic
model, dataclasses) and a JSON-only ~2 KB chat-like state. For each state and serializer the
script runs 11 repetitions of N iterations (N chosen so a dumps+loads run takes about 0.4 s),
the serializers alternating operation by operation, and reports medians. It prints a markdown table and writes it into the ``## Codec`` section of
``benchmarks/RESULTS.md``, with a profile summary for any target it misses.

Targets (dumps+loads ops/s, durability / JsonPlusSerializer): rich state >= 3x, chat state
>= 0.6x; dumps and loads are reported apart as well.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from importlib.metadata import version
from pathlib import Path
from typing import Any
from uuid import UUID

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from durability import codec

HEADING = "## Codec"
TARGETS = {"rich": 3.0, "chat": 0.6}
REPETITIONS = 11
RUN_SECONDS = 0.4
# Measured once, side by side, when the fast paths went in; kept as the record to compare with.
BEFORE = (
    "**Before and after the fast paths (issue 15).** The codec of efbee6f, this one and "
    "JsonPlusSerializer in one process, 15 alternated runs each, medians, 2026-12-03 (load "
    "average 1.8-2.0): JSON-only dumps 75,530 -> 145,495 ops/s, loads 136,425 -> 190,526, "
    "dumps+loads 46,534 -> 87,054 (0.39x -> 0.74x JsonPlusSerializer); rich dumps 30,954 -> "
    "30,253, loads 19,741 -> 23,346, dumps+loads 9,183 -> 10,341 (2.49x -> 2.80x). Across "
    "ten runs of this file that day (load average 0.8-2.0) the JSON-only ratio came out "
    "0.64-0.84x, and the rich one 2.17-3.15x with a median of 2.6x: the 3x rich target is "
    "not met reliably, whatever the verdict of one run. Its dumps+loads swings with the "
    "shared machine's load because it is Python on one side and mostly C on the other."
)
# What the profiles and part-by-part timings show, per state (min of 25 runs, 2026-12-03).
WHERE = {
    "chat": (
        "A JSON-only state never meets the walk: `dumps` (~5.0 µs) is orjson writing the text "
        "(1.5 µs), ormsgpack checking in C that no part is one orjson would write its own way "
        "(1.7), the scan of its bytes for a NaN from the first float (0.5), the check that "
        "the top dict's values are JSON types (0.3-0.4), bytes to str (0.2), the marker check "
        "(0.1) and the calls. JsonPlusSerializer's `dumps_typed` is one ormsgpack pass "
        "(1.65 µs): a design that needs orjson's text and a check of every part stays at about "
        "half its speed, the floor for `dumps`. `loads` is `orjson.loads` (4.5 µs) plus a "
        "memchr for `$`, level with JsonPlusSerializer's ormsgpack unpack."
    ),
    "rich": (
        "`loads` (~39 µs): `orjson.loads` 8 µs (20 %), reviving the six dataclasses ~10.7 µs "
        "(27 %: `cls.__new__` and a set per field, a cached reader per class path), the five "
        "UUIDs ~5.9 µs (15 %), the pydantic model with its datetime ~4.5 µs (11 %), the set, "
        "bytes, Decimal and datetime ~4 µs, the JSON-native parts and the top dict ~2 µs. "
        "`dumps` (~27 µs): the walk ~23 µs (dataclasses 6.0, UUIDs 3.3, the model 2.8, the "
        "JSON-native lists and dicts 5.2, which it must still visit since the value as a whole "
        "is not JSON-native, the rest ~6) and orjson 3.4 µs. JsonPlusSerializer spends ~150 "
        "µs in `dumps_typed` (a Python hook per object) and ~52 µs in `loads_typed`, so the "
        "ratio rests on `loads`, where both sides build the same objects in Python: the floor "
        "is about 1 µs per revived object plus the parse. Back to back, as in `loads(dumps())`, "
        "the encode and decode walks cost 10-12 µs more than apart, while the parse alone "
        "loses ~1 µs: most likely CPU caches shared by two large Python code paths (this VM "
        "exposes no hardware counters to confirm it); that is why the "
        "dumps+loads ratio sits below what the dumps and loads ratios give apart. What would "
        "take it further: fewer Python steps per revived object, which means C."
    ),
}


@dataclass(frozen=True, slots=True)
class Step:
    """A step of a plan."""

    name: str
    tool: str
    attempts: int = 0
    done: bool = False


@dataclass
class Budget:
    """A spend budget."""

    limit_cents: int
    spent_cents: int = 0
    currency: str = "EUR"


@dataclass
class Plan:
    """A plan made of steps."""

    goal: str
    steps: list[Step] = field(default_factory=list)
    budget: Budget | None = None


class Customer(BaseModel):
    """A customer record, as a pydantic model."""

    customer_id: str
    name: str
    email: str
    tier: str = "standard"
    since: datetime
    tags: list[str] = []


def rich_state() -> dict[str, Any]:
    """A ~2 KB state full of values JSON has no form for."""
    rng = random.Random(4)
    uuids = [UUID(int=rng.getrandbits(128), version=4) for _ in range(5)]
    steps = [
        Step(name=f"step-{i}", tool=rng.choice(["search", "fetch", "summarise"]), attempts=i)
        for i in range(4)
    ]
    return {
        "run_id": str(uuids[0]),
        "started_at": datetime(2026, 1, 1, 12, 30, 15, 250_000, tzinfo=UTC),
        "total": Decimal("1234.5678"),
        "request_ids": uuids,
        "labels": {"urgent", "billing", "refund", "escalated"},
        "attachment": bytes(rng.getrandbits(8) for _ in range(96)),
        "customer": Customer(
            customer_id="c-1029",
            name="Ada Lovelace",
            email="ada@example.com",
            tier="gold",
            since=datetime(2020, 5, 17, 9, 0, tzinfo=UTC),
            tags=["vip", "analytics"],
        ),
        "plan": Plan(goal="refund the duplicate charge", steps=steps, budget=Budget(5000)),
        "notes": [
            {"author": "agent", "text": f"note {i}: " + "checked the ledger entries " * 3}
            for i in range(6)
        ],
        "scores": [round(rng.random(), 6) for _ in range(20)],
        "counters": {f"node_{i}": rng.randrange(100) for i in range(12)},
    }


def chat_state() -> dict[str, Any]:
    """A JSON-only ~2 KB chat-like state: messages plus a context dict."""
    rng = random.Random(5)
    words = ["the", "refund", "was", "issued", "to", "card", "ending", "in", "four", "two"]
    words += ["and", "will", "arrive", "soon", "today"]
    messages = [
        {
            "role": ("user", "assistant")[i % 2],
            "content": " ".join(rng.choice(words) for _ in range(18)),
            "name": ("ada", "helper")[i % 2],
        }
        for i in range(12)
    ]
    return {
        "messages": messages,
        "context": {
            "thread_id": "t-8812",
            "locale": "en-GB",
            "turn": 12,
            "flags": {"escalated": False, "vip": True},
            "retrieved": [{"doc": f"kb-{i}", "score": 0.9 - i / 10} for i in range(5)],
        },
    }


def _runner(kind: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    if kind == "durability":
        return codec.dumps, codec.loads
    serde = JsonPlusSerializer(allowed_msgpack_modules=[Step, Budget, Plan, Customer])
    return serde.dumps_typed, serde.loads_typed


def _timed(n: int, op: Callable[[], Any]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        op()
    return time.perf_counter() - start


def measure(state: Any) -> dict[str, dict[str, float]]:
    """Median dumps, loads and dumps+loads ops/s of both serializers on one state."""
    ops: dict[str, dict[str, Callable[[], Any]]] = {}
    sizes: dict[str, int] = {}
    for kind in ("durability", "jsonplus"):
        dumps, loads = _runner(kind)
        encoded = dumps(state)
        if loads(encoded) != state:
            raise SystemExit(f"{kind} does not round-trip the state")
        sizes[kind] = len(encoded.encode()) if isinstance(encoded, str) else len(encoded[1])
        ops[kind] = {
            "dumps": lambda dumps=dumps: dumps(state),
            "loads": lambda loads=loads, encoded=encoded: loads(encoded),
            "both": lambda dumps=dumps, loads=loads: loads(dumps(state)),
        }
    probe = 200
    counts = {
        kind: max(probe, int(probe * RUN_SECONDS / _timed(probe, kind_ops["both"])))
        for kind, kind_ops in ops.items()
    }
    runs: dict[str, dict[str, list[float]]] = {kind: {op: [] for op in ops[kind]} for kind in ops}
    for repetition in range(REPETITIONS):
        # Each operation runs on both serializers back to back, first one then the other
        # leading, so a change in the shared machine's load falls on both alike.
        kinds = list(ops) if repetition % 2 == 0 else list(reversed(ops))
        for op in ("dumps", "loads", "both"):
            for kind in kinds:
                runs[kind][op].append(counts[kind] / _timed(counts[kind], ops[kind][op]))
    return {
        kind: {
            **{op: statistics.median(values) for op, values in runs[kind].items()},
            "bytes": sizes[kind],
            "n": counts[kind],
        }
        for kind in ops
    }


def profile_summary(state: Any, iterations: int = 3000, top: int = 10) -> str:
    """Where durability's dumps+loads spends its time on ``state`` (cProfile, by tottime)."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(iterations):
        codec.loads(codec.dumps(state))
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    root = str(Path(__file__).resolve().parent.parent) + "/"
    lines = [line.replace(root, "") for line in out.getvalue().splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    return "\n".join(lines[start:])


def results_table(rows: list[tuple[str, dict[str, float], dict[str, float]]]) -> list[str]:
    """The markdown table: both serializers' ops/s per state, and their ratios."""
    table = [
        "| state | serializer | dumps ops/s | loads ops/s | dumps+loads ops/s | bytes |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, ours, theirs in rows:
        for label, r in (("durability.codec", ours), ("JsonPlusSerializer", theirs)):
            table.append(
                f"| {name} | {label} | {r['dumps']:,.0f} | {r['loads']:,.0f} "
                f"| {r['both']:,.0f} | {r['bytes']:,.0f} |"
            )
        table.append(
            f"| {name} | ratio | {ours['dumps'] / theirs['dumps']:.2f}x "
            f"| {ours['loads'] / theirs['loads']:.2f}x | **{ours['both'] / theirs['both']:.2f}x** | |"
        )
    return table


def main() -> None:
    """Run the benchmark, print the section and write it into RESULTS.md."""
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args()
    load = os.getloadavg()[0]
    states = {"rich": rich_state(), "chat": chat_state()}
    rows = []
    verdicts = []
    for name, state in states.items():
        results = measure(state)
        ours, theirs = results["durability"], results["jsonplus"]
        ratio = ours["both"] / theirs["both"]
        verdict = "**met**" if ratio >= TARGETS[name] else "**missed**"
        rows.append((name, ours, theirs))
        verdicts.append(
            f"- {name} state: {ratio:.2f}x JsonPlusSerializer (target >= {TARGETS[name]}x): "
            + verdict
        )
        print(f"{name}: {ratio:.2f}x (target {TARGETS[name]}x)", file=sys.stderr)
    section = [
        HEADING,
        "",
        "Command: `.venv/bin/python benchmarks/bench_codec.py`",
        "",
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; Python {platform.python_version()}, "
        f"orjson {version('orjson')}, ormsgpack {version('ormsgpack')}, langgraph "
        f"{version('langgraph')}, langgraph-checkpoint {version('langgraph-checkpoint')}; "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load average {load:.1f} at the start "
        "(the machine is shared, so absolute figures are noisy; the ratios are what to read).",
        "",
        f"Medians of {REPETITIONS} runs of N iterations (N sized for about "
        f"{RUN_SECONDS:.1f} s of dumps+loads), the two serializers alternating operation by "
        "operation in one process, each leading in turn. JsonPlusSerializer is "
        "`dumps_typed`/`loads_typed` with the state's classes in `allowed_msgpack_modules`. "
        "The rich state holds a datetime, a Decimal, 5 UUIDs, a set, bytes, a pydantic model "
        "and 6 dataclasses; the chat state is JSON only.",
        "",
        *results_table(rows),
        "",
        *verdicts,
        "",
        BEFORE,
    ]
    for name, state in states.items():
        section += [
            "",
            f"**Where the time goes, {name} state.** {WHERE[name]}",
            "",
            f"Profile of durability.codec dumps+loads on the {name} state (cProfile, tottime; "
            "it inflates Python calls against C):",
            "",
            "```",
            profile_summary(state),
            "```",
        ]
    text = "\n".join(section) + "\n"
    print(text)
    write_section(text)


def write_section(section: str) -> None:
    """Replace (or append) only the ``## Codec`` section of RESULTS.md."""
    from _results import write_section as write

    write(HEADING, section)


if __name__ == "__main__":
    main()
