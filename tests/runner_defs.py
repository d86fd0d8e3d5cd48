"""Runner definitions the runner tests load by module path, and a script mode for subprocesses.

``python runner_defs.py start URL OPTIONS_JSON`` starts a ``crashy`` run that hangs in its
second step (the parent SIGKILLs it there); ``python runner_defs.py resume URL OPTIONS_JSON
THREAD VALUE_JSON`` resumes an ``approval`` run and prints the outcome as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from durability.errors import RunNotResumable
from durability.runs import RunContext, Runner
from durability.stores import Store
from durability.testing.suite import in_threads

HANG = "RUNNER_DEFS_HANG"


def draft(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Write a draft."""
    return {**state, "draft": f"about {state.get('topic', '?')}"}


def approve(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Ask a human; the answer comes back through resume."""
    answer = ctx.interrupt("needs approval", {"draft": state["draft"]}, deadline=timedelta(days=2))
    return {**state, "approved": answer["approved"], "approved_by_pid": os.getpid()}


def publish(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """Publish the approved draft."""
    return {**state, "published": bool(state.get("approved"))}


approval = Runner("approval", [draft, approve, publish])


def make_approval() -> Runner:
    """A factory, as `--runner runner_defs:make_approval` accepts."""
    return approval


def race_resumes(
    handles: list[Store], thread_id: str, **options: Any
) -> tuple[list[Any], list[RunNotResumable], int]:
    """Every handle resumes the ``approval`` park of ``thread_id`` at once, one thread each,
    then is closed; the run that wins holds its lease in the approval step until every other
    resumer has lost. Returns the results, the losers' refusals and how often the step ran."""
    losers: list[RunNotResumable] = []
    ran: list[int] = []
    lock = threading.Lock()

    def held_approve(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        ran.append(1)
        deadline = time.monotonic() + 20
        while len(losers) < len(handles) - 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        return approve(state, ctx)

    racer = Runner("approval", [draft, ("approve", held_approve), publish])
    barrier = threading.Barrier(len(handles))
    results: list[Any] = []

    def resume(handle: Store) -> None:
        barrier.wait()
        try:
            results.append(racer.resume(handle, thread_id, {"approved": True}, **options))
        except RunNotResumable as exc:
            with lock:
                losers.append(exc)

    in_threads(resume, [(h,) for h in handles], timeout=60)
    for h in handles:
        h.close()
    return results, losers, len(ran)


def _mark(name: str) -> Any:
    def step(state: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
        if name == "two" and os.environ.get(HANG) == "1":
            print(f"in-two {ctx.thread_id}", flush=True)
            time.sleep(120)  # killed here by the parent
        return {**state, "pids": {**state.get("pids", {}), name: os.getpid()}}

    return step


crashy = Runner("crashy", [("one", _mark("one")), ("two", _mark("two")), ("three", _mark("three"))])


def main(argv: list[str]) -> None:
    """Script mode for the subprocess tests."""
    import durability
    from durability.errors import RunNotResumable
    from durability.settings import Settings

    mode, url, options = argv[0], argv[1], json.loads(argv[2])
    with durability.open(url, settings=Settings(), **options) as store:
        if mode == "start":
            crashy.start(store, {"pids": {}})
        elif mode == "resume":
            try:
                result = approval.resume(store, argv[3], json.loads(argv[4]))
                print(json.dumps({"status": result.status}), flush=True)
            except RunNotResumable as exc:
                print(json.dumps({"refused": type(exc).__name__}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
