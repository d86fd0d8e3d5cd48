"""Write the bundle's three notebooks (notebooks/*.ipynb) from the cells below, outputs empty.

The notebooks are committed as plain .ipynb files (users open them straight in JupyterLab);
this script is their source of truth, so a change is made here and the notebooks regenerated:

    python scripts/build_notebooks.py

Each notebook has one cell tagged ``parameters`` (plain assignments, papermill's convention):
``durability demo`` and ``durability lab`` replace it with the demo's values, and the defaults
point at the demo store relative to the notebooks folder of a clone.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

Cell = tuple[str, str]  # ("md" | "code" | "parameters", source)


def md(text: str) -> Cell:
    return ("md", text.strip())


def code(text: str) -> Cell:
    return ("code", text.strip())


def parameters(text: str) -> Cell:
    return ("parameters", text.strip())


SETUP = """
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display

import durability
from durability import bundle, frames, plots, tables

tables.init_notebook()  # every table sorts, searches and pages; tables.show adds people's units
charts = Path(output_dir)
charts.mkdir(parents=True, exist_ok=True)
store = durability.open(store_url)
print(f"store: {store!r}")
"""

EXPLORE: list[Cell] = [
    md("""
# Explore a checkpoint store

This notebook is for the operator of an agent platform: it opens one checkpoint store — the
embedded SQLite default, Postgres, Redis, or a store another tool wrote (fastaiagent, LangGraph,
read-only) — and shows what is in it: which threads and runs it holds, how they ended, **what
reached the control plane and what is stuck** in the outbox, and how the replication backlog
moved over time. Every table below is a `durability.frames` DataFrame, so you can keep
exploring it with pandas.

Set the store in the next cell (it is tagged `parameters`: `durability demo` and
`durability lab` fill it in for you).
"""),
    parameters("""
store_url = "sqlite:///../durability-out/demo.db"  # any store URL: sqlite, postgresql, redis, fastaiagent+…, langgraph+…
plane_url = None  # the plane this store replicates to, e.g. "http://127.0.0.1:8700"; None: local view only
api_key_env = "DURABILITY_PLANE_API_KEY"  # the environment variable holding the plane's API key
output_dir = "../durability-out/charts"  # where the charts are saved as PNG
foreign_url = None  # a store another tool wrote, e.g. "langgraph+sqlite:///checkpoints.db"
outage_length = "2d"  # a plane outage to simulate over the recorded writes
drain_rate = 0.05  # rows per second the outbox sends once the plane is back (None: all at once)
"""),
    code(SETUP),
    md("""
## Threads

A *thread* is one conversation, flow session or agent session. Each row below is one thread:
who owns it, how many checkpoints and bytes it holds, when it was last written, whether its
owner marked it finished (and when the sweep may delete it: `due_at`), the retention it declared,
and whether a run is parked on it.
"""),
    code("""
threads = frames.threads(store)
print(f"{len(threads)} threads, {int(threads.checkpoints.sum())} checkpoints, {int(threads.size_bytes.sum()):,} bytes")
tables.show(threads.sort_values("newest_at", ascending=False), "threads, newest write first")
"""),
    code("""
# Who owns the threads: runs that minted their thread, conversations, flows and the sessions they own.
threads.groupby("owner", dropna=False).agg(threads=("thread_id", "size"), checkpoints=("checkpoints", "sum"), finished=("finished_at", "count"))
"""),
    md("""
## Where the bytes are

Bytes and checkpoints by owner, runner and node come from every checkpoint's size, read from
the store's headers (no payload is read); the top-level state keys (`messages`, `documents` …)
are estimated from a sample of checkpoints, whose state is read — the panel says how many.
"""),
    code("""
from durability import analyses
from durability.analyses import charts as analysis_charts

by_owner, by_runner, by_node = (analyses.bytes_by(store, by) for by in ("owner", "runner", "node"))
by_key = analyses.bytes_by_state_key(store, sample=200)
bundle.chart(analysis_charts.where_bytes(by_owner, by_runner, by_node, by_key), "where_bytes", charts)
tables.show(by_owner, "bytes by owner")
"""),
    code("""
# The largest threads and checkpoints.
tables.show(analyses.largest_threads(store, 20), "the largest threads")
tables.show(analyses.largest_checkpoints(store, 20), "the largest checkpoints")
"""),
    md("""
## If this disk died now: restore readiness

For each thread, what a restore from the plane would bring back right now: **everything**,
its checkpoints **up to** the first one the plane lacks (**partly**: a row still pending in the
outbox, or quarantined by the plane), or **nothing** (a store never connected to a plane).
"""),
    code("""
ready = analyses.readiness(store)
ready_by_owner = analyses.readiness_by_owner(ready)
bundle.chart(analysis_charts.readiness_chart(ready_by_owner), "readiness", charts)
tables.show(ready_by_owner, "restore readiness by owner")
tables.show(ready[ready.restorable != "everything"], "threads a restore would not bring back whole")
"""),
    md("""
## Runs and how they ended

A run ends *completed*, *failed*, or it is *parked*: waiting on a human answer with a deadline.
A failed run's `reason` says why it ended: `error` (a step raised; `error` holds the exception),
`cancelled` (an operator stopped it), `aborted` (stopped, discarding the step in flight) or
`timeout`. The chart counts runs by status per day and per runner.
"""),
    code("""
runs = frames.runs(store)
display(runs.groupby(["runner", "status"], observed=True).size().unstack(fill_value=0))
bundle.chart(plots.run_health(runs), "run_health", charts)
"""),
    code("""
# Why the failed runs ended, and the last ones.
failed = runs[runs.status == "failed"]
display(failed.groupby("reason", dropna=False).size().rename("runs").to_frame())
failed.sort_values("ended_at", ascending=False)[["run_id", "runner", "reason", "error", "ended_at"]].head(10)
"""),
    code("""
parks = frames.parks(store)
print(f"{len(parks)} parked runs, {int(parks.expired.sum())} past their deadline")
parks
"""),
    md("""
## The outbox: what reached the plane and what is stuck

Every checkpoint is written locally first and then drained to the plane. A row is **synced**
once the plane has it, **pending** while it waits (the plane was down, or nothing has drained it
yet), and **quarantined** when the plane refused it on payload grounds — the plane's own
explanation is in `sync_error`. Quarantined rows never block the others; release them with
`durability outbox release` once the plane accepts them (e.g. after its cap was raised).
"""),
    code("""
outbox = frames.outbox(store)
display(outbox.groupby("state", observed=True).agg(rows=("checkpoint_id", "size"), bytes=("size_bytes", "sum"), attempts=("attempts", "sum")))
outbox[outbox.state == "quarantined"][["thread_id", "checkpoint_id", "size_bytes", "attempts", "sync_error"]]
"""),
    code("""
# Rows still waiting for the plane, oldest first.
outbox[outbox.state == "pending"].sort_values("created_at")[["thread_id", "created_at", "age", "attempts", "last_error"]]
"""),
    md("""
## Replication backlog over time

How many rows were waiting for the plane at each moment, and how old the oldest of them was. A
plane outage shows as a ramp that drains at once when the plane comes back; a backlog that
never drains means nothing is connected to drain it.
"""),
    code("""
backlog = frames.backlog(store, freq="6h")
bundle.chart(plots.backlog(backlog), "backlog", charts)
"""),
    md("""
## Watch the outbox, release what the plane refused

The monitor below shows the same backlog, the quarantined rows and a **Release** button: it puts
them back in the outbox (`store.release`), so the next drain sends them again. Press it once the
plane accepts them — after its cap was raised, say; until then they would only be refused again.
**Refresh** reads the outbox again.
"""),
    code("""
from durability.widgets import OutboxMonitor

monitor = OutboxMonitor(store, freq="6h")
monitor.widget
"""),
    md("""
## What if the plane went down?

The writes this store recorded, replayed against a plane outage of `outage_length` that starts
two outage lengths before the newest write: nothing drains while the plane is down, then the outbox
sends its rows in write order at `drain_rate` rows per second while new ones keep arriving. How
many rows would wait, and how old the oldest would get, says whether the outbox (and the disk it
lives on) rides out such an outage.
"""),
    code("""
from durability import simulate
from durability.settings import parse_duration

written = frames.write_times(store)  # the write times alone: what the replay needs
if len(written):
    length = parse_duration(outage_length)
    outage_start = written.created_at.max().to_pydatetime() - 2 * length
    outage = simulate.outage_backlog(written, outage_start, length, drain_rate)
    print(simulate.describe_outage(outage))
    bundle.chart(plots.backlog(outage, title=f"Outbox backlog under a {outage_length} plane outage"), "outage_backlog", charts)
else:
    print("the store holds no checkpoint: no writes to replay")
"""),
    md("""
## What the plane holds

With a plane URL and its key, the plane's own view of run health: the runs it has seen, each
with its status as the plane knows it ("completed" only once the run end reached it).
"""),
    code("""
import os

from durability import replication

if plane_url:
    client = replication.PlaneClient(plane_url, os.environ[api_key_env])
    plane_runs = frames.plane_runs(client)
    local = set(runs.run_id)
    print(f"the plane holds {len(plane_runs)} runs; {len(set(plane_runs.run_id) - local)} of them are not in this store")
    display(plane_runs.groupby("status", observed=True).size().rename("runs").to_frame())
else:
    print("no plane_url: set it (and the key's environment variable) to compare with the plane")
"""),
    md("""
## Is the store whole?

`frames.problems` is `durability doctor` as a frame: every invariant the store relies on,
each break with its check, severity, thread, rows and the command that fixes it. `info`
findings are the sweep's pending work (marks past due, parks past their deadline), not breaks.
"""),
    code("""
problems = frames.problems(store)
broken = problems[problems.severity != "info"]
print(f"{len(broken)} breaks, {len(problems) - len(broken)} notes (the sweep's pending work)")
if not problems.empty:
    display(problems.groupby(["severity", "check"], observed=True).size().rename("problems").to_frame())
    display(problems[["check", "severity", "thread_id", "rows", "detail"]].head(10))
print("repair the safe ones with: durability doctor URL --fix")
"""),
    md("""
## Encryption coverage

A store opened with a keyring (`DURABILITY_ENCRYPTION_KEYS`) seals every checkpoint's state
(see the encryption guide). This view reads only the envelopes' clear headers, so it needs no
key: rows and bytes per key id, each *current*, *older* (retired: `durability store reencrypt`
moves them), *missing* from the keyring, or *clear*.
"""),
    code("""
coverage = frames.encryption(store)
print(f"{coverage.attrs['percent_encrypted']:.1f} % of rows encrypted; {coverage.attrs['clear_rows']} in clear, {coverage.attrs['retired_rows']} under retired or missing keys")
display(coverage)
plots.encryption(coverage)
"""),
    md("""
## One thread, step by step

Type the start of a thread id in **search** (the store answers with a page of matching ids, in
id order; **Next page** for more — it never lists every thread of a large store), pick one, and
see its checkpoints in write order and the state each step saved.
"""),
    code("""
from durability.widgets import StoreExplorer

explorer = StoreExplorer(store)
explorer.widget
"""),
    md("""
## A store another tool wrote

The same frames work on stores written by fastaiagent (`fastaiagent+sqlite:///…/local.db`,
`fastaiagent+postgresql://…?schema=…`) or by LangGraph's savers (`langgraph+sqlite:///…`,
`langgraph+postgresql://…`). They are opened **read-only**: SQLite files are opened with
`mode=ro`, so an agent that is still writing keeps running and the file stays byte-identical.
A LangGraph interrupt shows as an `interrupted` checkpoint: a waiting thread, not a park.
"""),
    code("""
if foreign_url:
    foreign = durability.open(foreign_url)
    foreign_threads = frames.threads(foreign)
    print(f"{foreign!r}: {len(foreign_threads)} threads (read-only)")
    display(foreign_threads[["thread_id", "owner", "status", "checkpoints", "newest_at"]])
    display(frames.checkpoints(foreign)[["thread_id", "seq", "node_id", "step_type", "status", "created_at"]].head(20))
else:
    print("no foreign_url: set it to a fastaiagent+… or langgraph+… URL to explore that store")
"""),
]

PLAN: list[Cell] = [
    md("""
# Plan retention

Two values decide how long checkpoints live: **waiting** (a thread nobody marked finished lives
this long after its newest checkpoint — a conversation someone may still continue) and
**finished** (a thread whose owner marked it finished lives this long after the mark). The
sweep is the one scheduled deletion. This notebook shows **which threads the next sweep deletes
and why**, what it spares (a parked run waiting on a human, a live lease, checkpoints the plane
does not have yet), and **what a shorter retention would cost**: conversations lost between two
turns, parks that would have been refused, bytes kept over the coming weeks.
"""),
    parameters("""
store_url = "sqlite:///../durability-out/demo.db"  # any store URL
output_dir = "../durability-out/charts"  # where the charts are saved as PNG
now = None  # the sweep's "now" (ISO 8601); None: the current time
proposed_waiting = "7d"  # a shorter waiting retention to compare with the current one
proposed_finished = "2d"  # a shorter finished retention
"""),
    code(SETUP),
    code("""
from datetime import timedelta

from durability import simulate, sweep
from durability.clock import parse_aware
from durability.settings import Settings, format_duration

settings = Settings.from_env()  # DURABILITY_WAITING_RETENTION / DURABILITY_FINISHED_RETENTION, else 30d / 7d
at = parse_aware(now) if now else store.clock()
print(f"current retention: waiting {format_duration(settings.waiting_retention)}, finished {format_duration(settings.finished_retention)}; now = {at:%Y-%m-%d %H:%M} UTC")
"""),
    md("""
## What the next sweep deletes, and why

`plan_sweep` is the sweep's own selection without the deletes, so this preview cannot disagree
with the sweep. Each thread gets an action: **delete** (its horizon has passed), **spared** (a
live-thread filter claimed it: `owner` says which, `reason` why), **not_due** (its due time is
in the future), or **skipped** (the store enforces that horizon itself, e.g. Redis key TTLs).
"""),
    code("""
SHOWN = 1000  # rows a table below shows at most; the counts above it are of every thread
plan = sweep.plan_sweep(store, settings, at)
groups = plan.groups()  # threads, checkpoints and bytes per horizon and action, of the whole plan
actions = groups.groupby(level="action")["threads"].sum()
print(f"the next sweep deletes {actions.get('delete', 0)} of {plan.summary()['threads']} threads and spares {actions.get('spared', 0)}")
groups
"""),
    code("""
# The threads the next sweep deletes, with the reason (the first SHOWN of them, in the order it deletes them).
going = plan.to_frame(action="delete", limit=SHOWN)
tables.show(going[["thread_id", "horizon", "reason", "due_at", "newest_at", "checkpoints", "size_bytes"]], f"the first {len(going):,} of the {actions.get('delete', 0):,} threads the next sweep deletes")
"""),
    code("""
# The threads a filter spares: deleted by a later sweep, once they are no longer live.
spared = plan.to_frame(action="spared", limit=SHOWN)
tables.show(spared[["thread_id", "horizon", "owner", "reason", "due_at"]], f"the first {len(spared):,} of the {actions.get('spared', 0):,} threads a filter spares")
"""),
    md("""
## Threads and bytes kept against the waiting value

For each candidate waiting value: how many threads (and bytes) a sweep now would keep. The
solid black line is the value in force, the dashed purple one the proposed value (the same
colours in every chart of the bundle).
"""),
    code("""
proposed = settings.update(waiting_retention=proposed_waiting, finished_retention=proposed_finished)
threads = frames.threads(store, now=at)
waitings = [timedelta(days=d) for d in (1, 2, 3, 5, 7, 10, 14, 21, 30, 45, 60)]
bundle.chart(plots.retention_curve(threads, waitings, current=settings.waiting_retention, proposed=proposed.waiting_retention, now=at), "retention_curve", charts)
"""),
    md("""
## What a shorter retention would cost

A conversation is never marked finished: it lives on the waiting horizon. When the gap between
two of its turns is longer than the waiting value, the sweep deletes it in between and the user
comes back to nothing. The chart shows each thread's longest idle gap against the proposed value.
"""),
    code("""
bundle.chart(plots.idle_gaps(threads, proposed.waiting_retention, in_force=settings), "idle_gaps", charts)
lost = simulate.lost_conversations(threads, proposed.waiting_retention)  # longest excess first
print(f"waiting {proposed_waiting} would lose {len(lost)} threads between two turns")
tables.show(lost.head(SHOWN), f"the {min(len(lost), SHOWN):,} of {len(lost):,} lost threads idle longest past the proposed waiting value")
"""),
    code("""
# A park's deadline must fall within its thread's waiting retention: these parks would have been refused.
refused = simulate.refused_parks(frames.parks(store), proposed.waiting_retention)
print(f"waiting {proposed_waiting} would have refused {len(refused)} parks")
refused
"""),
    code("""
# Threads whose sweep action changes under the proposed values: how many per change, then the first SHOWN.
changes = sweep.policy_diff(store, settings, proposed, at)
display(changes.groupby(["current_action", "proposed_action"]).agg(threads=("thread_id", "size"), checkpoints=("checkpoints", "sum"), bytes=("size_bytes", "sum")))
tables.show(changes.head(SHOWN), f"the first {min(len(changes), SHOWN):,} of {len(changes):,} threads whose action changes")
"""),
    md("""
## The coming weeks, day by day

One simulated sweep a day for four weeks under the current and the proposed values (assuming
no new writes): threads deleted per day by horizon, and what remains.
"""),
    code("""
policies = [simulate.Policy.from_settings(settings), simulate.Policy.from_settings(proposed)]
days = simulate.daily(threads, policies, at, 28)
bundle.chart(plots.sweep_timeline(days, in_force=policies[0].label), "sweep_timeline", charts)
days.groupby("policy").agg(deleted_threads=("deleted_threads", "sum"), deleted_bytes=("deleted_bytes", "sum"))
"""),
    md("""
## When will the store be full?

Bytes and threads over the next 90 days if the store keeps writing as it did over the last four
weeks (by weekday), under the policy in force (solid black) and the proposed one (dashed
purple); the chart dates the day each crosses the size set below.
"""),
    code("""
from durability import analyses
from durability.analyses import charts as analysis_charts
from durability.humanize import format_bytes

in_force, proposal = simulate.Policy.from_settings(settings), simulate.Policy.from_settings(proposed)
growth = analyses.forecast(store, [in_force, proposal], days=90, now=at, threads=threads)
size_limit = 2 * int(threads.size_bytes.sum())  # set the size you care about, in bytes
bundle.chart(analysis_charts.forecast_chart(growth, size_limit), "forecast", charts)
print(f"the day the store holds {format_bytes(size_limit)}:", analyses.crossing(growth, size_limit))
"""),
    md("""
## What the proposed policy would have done: a backtest

The last four weeks replayed, one sweep a day, under the policy in force and the proposed one:
the storage each would have held, and each conversation it would have cut between two turns.
A store only remembers what its current policy kept, so a policy *longer* than the one in
force can only be judged on the threads still there.
"""),
    code("""
replay = analyses.backtest(store, proposal, in_force=in_force, days=28, now=at)
bundle.chart(analysis_charts.backtest_chart(replay), "backtest", charts)
cut = replay.cuts[replay.cuts.policy == proposal.label]
tables.show(cut.head(SHOWN), f"the first {min(len(cut), SHOWN):,} of {len(cut):,} conversations the proposed policy would have cut")
"""),
    md("""
## Thin instead of delete

Deleting a due thread frees all of it; thinning keeps every thread resumable and drops only its
older history (the latest checkpoint and what it references stay; rows the plane does not have
yet stay). The bars compare what the sweep in force would free (counted over every thread) with
what thinning every thread to its latest checkpoint would, estimated from a random sample of
threads when the store holds more (the chart says how large); `durability store thin URL`
applies it, plan first.
"""),
    code("""
from durability.sweep.thin import thin_vs_delete

savings = thin_vs_delete(store, keep_latest=1, plan=plan, sample=500)  # thinning planned for 500 threads at most, each read by id
bundle.chart(analysis_charts.thin_vs_delete_chart(savings), "thin_vs_delete", charts)
of = f" (a sample of {savings.attrs['sample']:,} of {savings.attrs['threads']:,})" if savings.attrs["sample"] < savings.attrs["threads"] else ""
tables.show(savings.sort_values("thin_frees", ascending=False).head(20), f"threads thinning frees most{of}")
"""),
    md("""
## Try values yourself

Move the sliders (days) and the date: the summary, the chart and the table of what a sweep
would delete follow.
"""),
    code("""
from durability.widgets import RetentionPlanner

planner = RetentionPlanner(store, settings, at, threads=threads, plan=plan)  # the frame and plan above, not read again
planner.widget
"""),
]

RESTORE: list[Cell] = [
    md("""
# Restore a lost run

A worker's machine died and its local store with it. Everything it wrote was replicated to the
plane, so its runs can be brought back to a fresh store — on any machine — and continued: a
failed run resumes from its last real step, a parked run gets its park back (with the deadline
its ask declared) and waits for its answer. This notebook lists **what the plane holds that the
store does not**, shows the **restore plan** (a dry run: what would be written) before anything
is written, applies it, and resumes the run. The plane serves; the library executes.

Run it as often as you like: by default each run restores into **a copy of the store made for
it** (`copy_store`), so the store and the plane are as they were for the next run.
"""),
    parameters("""
store_url = "sqlite:///../durability-out/edge.db"  # the store to restore into (the lost store's replacement); a foreign store (fastaiagent+…, langgraph+…) is read-only and cannot be a restore target
copy_store = True  # restore into a copy of store_url made for this run (a SQLite file in copies_dir), so the notebook can run again; the copy is not connected, so nothing it resumes is sent to the plane. False (or a Postgres or Redis store): restore into store_url itself, connected, as the replacement worker does
copies_dir = "../durability-out/restore-copies"  # where each run's copy of the store is made
plane_url = None  # the plane, e.g. "http://127.0.0.1:8700"; None: explain how to start one and skip the restore
api_key_env = "DURABILITY_EDGE_PLANE_API_KEY"  # the environment variable holding the plane's API key
output_dir = "../durability-out/charts"  # where the charts are saved as PNG
thread_id = None  # the thread to restore; None: the first lost run that can be resumed (parked, then failed), else the first lost one
runner = "durability.demo:publish"  # MODULE:ATTR of the runner that resumes it
resume_value = {"approved": True}  # the answer a parked run is resumed with
"""),
    code("""
from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display

import durability
from durability import bundle, frames, plots, restore

charts = Path(output_dir)
charts.mkdir(parents=True, exist_ok=True)
single = {"single_worker": True} if store_url.startswith("sqlite") else {}
replacement = durability.open(store_url, **single)  # the replacement worker's store: connected below
if copy_store and restore.sqlite_path(store_url) is not None:
    store = durability.open(restore.copy_store(store_url, Path(copies_dir)), **single)
    print(f"restoring into a copy made for this run: {store!r} ({store_url} stays as it is)")
else:
    store = replacement
    if copy_store:
        print(f"copy_store: {replacement!r} is not a SQLite file, so this run restores into it directly")
    print(f"restoring into {store!r}: what it resumes is replicated, and is not resumed again by a next run")
"""),
    code("""
import os

from durability import replication
from durability.runs import NO_VALUE, load_runner

connection = None
if plane_url:
    # Connecting again (this cell run twice) returns this process's open connection.
    connection = replication.connect(replacement, plane_url, os.environ[api_key_env])
    print(connection)
else:
    print(
        "no plane_url: a restore reads the plane, so the sections below are skipped. To run them, "
        "either `durability lab` (after `durability demo`: it serves the demo's plane and opens "
        "these notebooks with plane_url and the key filled in), or serve a plane with "
        "`durability plane serve --db URL`, make a key with `durability plane keys create`, "
        "put it in the environment variable named by api_key_env and set plane_url here."
    )
written = frames.activity(store, "1D")  # counted in the store: one row per day, not per checkpoint
print(f"this store holds {int(written.checkpoints.sum()):,} checkpoints written on {len(written)} days")
"""),
    md("""
## What the plane has that this store lacks

The plane's run health for this project, next to the threads the store holds. Runs on threads
the store has no record of are the ones the lost machine took with it; those a runner can
continue (`resumable`: parked, failed or stalled) come first.
"""),
    code("""
if connection is None:
    print("skipped: no plane (see above)")
else:
    plane_runs = frames.plane_runs(connection)
    lost = restore.lost_threads(plane_runs, store)
    print(f"the plane holds {plane_runs.thread_id.nunique()} threads; {len(lost)} are missing from this store, {int(lost.resumable.sum())} of them resumable")
    project = connection.plane_identity.get("project_id") or "?"
    bundle.chart(plots.run_health(plane_runs, source=f"plane, project {project}"), "plane_run_health", charts)
    display(lost[["thread_id", "run_id", "runner", "status", "resumable", "reason", "steps", "ended_at"]])
"""),
    md("""
## The restore plan (nothing written yet)

`plan_restore` reads the thread from the plane — every checkpoint, in write order, from a plane
that serves history — and checks the store: a thread it already holds is never overwritten
silently, a park needs a store that can hold one. The park's deadline is the one its ask
declared (`deadline_source`: `declared`), or the thread's waiting horizon from a plane that does
not carry deadlines.
"""),
    code("""
if connection is None:
    print("skipped: no plane (see above)")
elif thread_id is None and lost.empty:
    print("nothing to restore: this store holds every thread the plane has")
else:
    thread_id = thread_id or lost.thread_id.iloc[0]
    plan = restore.plan_restore(store, thread_id, connection)
    print(f"restore {thread_id}: {len(plan.checkpoints)} checkpoints from the plane's {plan.source}; park: {plan.park is not None}; refusal: {plan.refusal}")
    display(plan.to_frame())
"""),
    md("""
## Apply it, then resume the run

Applying writes exactly the plan, holding the thread's lease; the restored rows are marked as
already replicated, so they are never sent back to the plane. Then the runner continues the
run: a parked run with its answer, a failed one from its last real step. A run that completed
is never resumed: it is left as restored, and forking it (a new thread from its last step) is
the way to run it again.
"""),
    code("""
if connection is None:
    print("skipped: no plane (see above)")
elif thread_id is None:
    print("nothing restored (see above)")
else:
    if plan.refusal is None:
        result = restore.apply_restore(store, plan)
        print(f"restored {len(result.checkpoints)} checkpoints; park: {result.park}")
    else:
        print(f"not restored: {plan.refusal}")
    run = load_runner(runner)
    latest = store.latest(thread_id)
    if latest is not None and latest.is_run_end and latest.status == "completed":
        print(
            f"not resumed: the run {latest.run_id} on {thread_id} completed, and a completed run is "
            f"never resumed; to run it again from its last step, fork it: run.fork(store, {thread_id!r}) "
            "(or Fork in the panel below)"
        )
    else:
        answer = resume_value if latest is not None and latest.status == "interrupted" else NO_VALUE
        resumed = run.resume(store, thread_id, answer)
        print(f"resumed {thread_id}: {resumed.status} at {resumed.last_step}")
    display(frames.checkpoints(store, thread_id=thread_id)[["seq", "run_id", "node_id", "step_type", "status", "created_at", "synced"]])
"""),
    md("""
## Restore another one from here

The panel does the same for any thread id: **Plan** shows the dry run, **Restore** applies it,
**Resume** continues the run with the value given, **Fork** runs a completed one again on a new
thread. It opens on the next thread the store lacks (a resumable one first), with its plan
already made: press **Restore** to write it, then **Resume**.
"""),
    code("""
import json

from durability.widgets import RestorePanel

if connection is None:
    print("skipped: no plane (see above)")
else:
    panel = RestorePanel(store, connection, runner=runner)
    panel.resume_value.value = json.dumps(resume_value)
    others = [t for t in lost.thread_id if t != thread_id]
    if others:  # the next lost thread, planned already: press Restore to apply the plan
        panel.thread_id.value = others[0]
    display(panel.widget)
"""),
]


def build(cells: list[Cell]) -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3 (ipykernel)",
            "language": "python",
            "name": "python3",
        },
        "language_info": {"name": "python"},
    }
    for kind, source in cells:
        if kind == "md":
            nb.cells.append(new_markdown_cell(source))
        else:
            cell = new_code_cell(source)
            if kind == "parameters":
                cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
    for n, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{n:02d}"
    return nb


def main() -> None:
    NOTEBOOKS.mkdir(exist_ok=True)
    for name, cells in (
        ("explore_store.ipynb", EXPLORE),
        ("plan_retention.ipynb", PLAN),
        ("restore_runs.ipynb", RESTORE),
    ):
        nbformat.write(build(cells), NOTEBOOKS / name)
        print(NOTEBOOKS / name)


if __name__ == "__main__":
    main()
