"""The aggregate-first paths (issue 16) on a store bulk-inserted by SQL, larger than the demo.

Each aggregate frame is checked against answers computed by hand from the rows written, the
SQL statements against the chunked defaults every other provider uses, and the explore
notebook is executed with a row cap below the store's size: it must not read a whole frame.
"""

from __future__ import annotations

import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pytest
import sqlalchemy as sa

import durability
from durability import analyses, bundle, frames, plots
from durability.analyses import charts
from durability.errors import ConfigError
from durability.frames.columns import MAX_ROWS_ENV
from durability.stores.aggregates import Aggregates
from durability.stores.base import Store
from durability.stores.rows import STORED_FIELDS
from durability.stores.sql.schema import checkpoint_key, thread_key

THREADS, PER_THREAD = 3_000, 4
NODES = ("__start__", "plan", "act", "run_end")
T0 = datetime(2026, 11, 1, tzinfo=UTC)
OWNERS = ("alpha", "beta", None)  # None: a thread no run recorded in the ledger


@dataclass
class Bulk:
    """The store and, per row written, ``(thread_id, node, runner, size, seq, owner)``; which
    seqs are pending and which quarantined (the rest the plane took)."""

    url: str
    rows: list[tuple[str, str, str, int, int, Any]]
    pending: set[int]
    quarantined: set[int]


#: A minute in microseconds.
MINUTE = 60_000_000


def _written(seq: int) -> int:
    """The write time of row ``seq`` (microseconds): a minute apart."""
    return int(T0.timestamp() * 1e6) + seq * MINUTE


def _size(t: int, n: int) -> int:
    return 500 + (t * 37 + n * 11) % 400 + (100_000 + t if t % 997 == 0 else 0)


@pytest.fixture(scope="module")
def bulk(tmp_path_factory: pytest.TempPathFactory) -> Bulk:
    path = tmp_path_factory.mktemp("scale") / "bulk.db"
    url = f"sqlite:///{path}"
    with durability.open(url) as store:
        store.record_connection("", "http://plane.invalid")
    columns = list(STORED_FIELDS)
    db = sqlite3.connect(path)
    rows, ledger = [], []
    seq = 0
    for t in range(THREADS):
        thread_id, owner = f"t-{t:05d}", OWNERS[t % 3]
        if owner is not None:
            ledger.append((thread_key(thread_id), thread_id, owner, T0.timestamp() * 1e6))
        for n in range(PER_THREAD):
            seq += 1
            size, node, runner = _size(t, n), NODES[n], ("r1", "r2")[t % 2]
            rows.append((thread_id, node, runner, size, seq, owner))
            values = dict.fromkeys(columns) | {
                "thread_id": thread_id, "namespace": "", "checkpoint_id": f"c{n}",
                "run_id": f"run-{t}", "runner": runner, "node_id": node, "step": n,
                "step_type": "run_end" if n == PER_THREAD - 1 else "node",
                "status": "failed" if n == PER_THREAD - 1 and t % 5 == 0 else "completed",
                "iteration": 0, "created_at": _written(seq),
                "project_id": "", "state": "{}", "node_input": "null", "node_output": "null",
                "iteration_counters": "{}", "interrupt_context": "null", "metadata": "{}",
                "size_bytes": size,
            }  # fmt: skip
            key = checkpoint_key(thread_id, "", f"c{n}")
            db.execute(
                f"INSERT INTO durability_checkpoints (tkey, ckey, {', '.join(columns)}) "
                f"VALUES (?, ?, {', '.join('?' * len(columns))})",
                (thread_key(thread_id), key, *(values[c] for c in columns)),
            )
    db.executemany(
        "INSERT INTO durability_threads (tkey, thread_id, owner, started_at) VALUES (?, ?, ?, ?)",
        ledger,
    )
    # Every row queued in the outbox, as the store's first read of it would (decision 0150).
    db.execute(
        "INSERT INTO durability_outbox (seq, project_id) "
        "SELECT seq, project_id FROM durability_checkpoints"
    )
    db.execute("UPDATE durability_meta SET value = ? WHERE key = 'outbox_through'", (str(seq),))
    pending = {s for s in range(1, seq + 1) if s > seq - 50 or s % 1000 == 7}
    quarantined = {s for s in range(1, seq + 1) if s % 1500 == 3}
    done = [s for s in range(1, seq + 1) if s not in pending | quarantined]
    # The plane took a row 0 to 4 x 40 minutes after its write (every tenth with no time
    # recorded) and refused a quarantined one 2 hours after.
    db.executemany(
        "INSERT INTO durability_synced (seq, synced_at, attempts) VALUES (?, ?, 1)",
        [(s, None if s % 10 == 0 else _written(s) + s % 5 * MINUTE * 40) for s in done],
    )
    db.executemany("DELETE FROM durability_outbox WHERE seq = ?", [(s,) for s in done])
    db.executemany(
        "UPDATE durability_outbox SET sync_error = 'over the cap', synced_at = ?, attempts = 2 "
        "WHERE seq = ?",
        [(_written(s) + 120 * MINUTE, s) for s in quarantined],
    )
    db.commit()
    db.close()
    return Bulk(url, rows, pending, quarantined)


@pytest.fixture
def store(bulk: Bulk) -> Iterator[Store]:
    with durability.open(bulk.url) as opened:
        yield opened


def test_checkpoint_groups_are_the_sums_by_hand(bulk: Bulk, store: Store) -> None:
    """Bytes, checkpoints and distinct threads per node and per runner, most bytes first."""
    for by, index in (("node_id", 1), ("runner", 2)):
        sums: dict[str, list[Any]] = defaultdict(lambda: [set(), 0, 0])
        for row in bulk.rows:
            entry = sums[row[index]]
            entry[0].add(row[0])
            entry[1] += 1
            entry[2] += row[3]
        order = sorted(sums, key=lambda k: (-sums[k][2], k))
        expected = {
            "key": order,
            "threads": [len(sums[k][0]) for k in order],
            "checkpoints": [sums[k][1] for k in order],
            "size_bytes": [sums[k][2] for k in order],
        }
        assert store.scans.checkpoint_groups(by) == expected
        assert Aggregates(store).checkpoint_groups(by) == expected  # the chunked default


def test_bytes_by_node_from_a_sample_is_labelled_and_near_the_sums(
    bulk: Bulk, store: Store
) -> None:
    """``bytes_by(sample=N)`` reads about N checkpoints (SQL and the chunked default alike),
    shares the store's totals out as among them, and says it is a sample and how large."""
    exact = analyses.bytes_by(store, "node")
    owners = frames.owners(store)
    estimate = analyses.bytes_by(store, "node", sample=3_000, owners=owners)
    assert estimate.attrs == {
        "sampled": estimate.attrs["sampled"],
        "population": len(bulk.rows),
        "store_bytes": sum(r[3] for r in bulk.rows),
    }
    assert 2_000 < estimate.attrs["sampled"] <= 3_000
    assert set(estimate.node) == set(exact.node)
    share = dict(zip(exact.node, exact.share, strict=True))
    for node, part in zip(estimate.node, estimate.share, strict=True):
        assert abs(part - share[node]) < 0.05, node
    assert estimate.checkpoints.sum() == pytest.approx(len(bulk.rows), abs=len(NODES))
    assert "sampled" not in exact.attrs
    for sampler in (store.scans, Aggregates(store)):
        picked = sampler.sample_columns(50, 1, columns=("thread_id", "seq", "node_id"))
        seqs = {r[4]: (r[0], r[1]) for r in bulk.rows}
        assert 0 < len(picked["seq"]) <= 50
        for thread_id, seq, node in zip(*picked.values(), strict=True):
            assert seqs[seq] == (thread_id, node)
    pd.testing.assert_frame_equal(
        analyses.bytes_by(store, "owner", owners=owners), analyses.bytes_by(store, "owner")
    )
    chart = charts.where_bytes(
        analyses.bytes_by(store, "owner"), estimate.rename(columns={"node": "runner"}), estimate,
        analyses.bytes_by_state_key(store, sample=5),
    )  # fmt: skip
    titles = [ax.get_title() for ax in chart.axes]
    assert (
        f"by node\n(estimated from a sample of {estimate.attrs['sampled']:,} of 12,000 checkpoints)"
        in titles
    )


def test_owners_frame_counts_every_thread(bulk: Bulk, store: Store) -> None:
    """``frames.owners``: threads, checkpoints and bytes per ledger owner, counted in the store."""
    threads: dict[Any, set[str]] = defaultdict(set)
    sizes: Counter[Any] = Counter()
    for thread_id, _, _, size, _, owner in bulk.rows:
        threads[owner].add(thread_id)
        sizes[owner] += size
    found = frames.owners(store)
    assert found.dtypes.astype(str).to_dict() == frames.COLUMNS["owners"]
    by_owner = {
        (None if pd.isna(o) else o): (t, c, b)
        for o, t, c, b in zip(found.owner, found.threads, found.checkpoints, found.size_bytes, strict=True)
    }  # fmt: skip
    assert by_owner == {
        o: (len(threads[o]), len(threads[o]) * PER_THREAD, sizes[o]) for o in OWNERS
    }
    assert list(found.size_bytes) == sorted(found.size_bytes, reverse=True)
    assert store.scans.owner_groups() == Aggregates(store).owner_groups()


def test_top_lists_are_the_largest_and_newest(bulk: Bulk, store: Store) -> None:
    """The largest checkpoints and threads and the newest threads, ranked in the store."""
    largest = sorted(bulk.rows, key=lambda r: (-r[3], r[4]))[:5]
    top = store.scans.top_checkpoints(5)
    assert list(zip(top["thread_id"], top["size_bytes"], strict=True)) == [
        (r[0], r[3]) for r in largest
    ]
    per_thread: Counter[str] = Counter()
    for row in bulk.rows:
        per_thread[row[0]] += row[3]
    expected = sorted(per_thread.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    assert list(analyses.largest_threads(store, 3).thread_id) == [t for t, _ in expected]
    newest = frames.top_threads(store, 4)
    assert newest.dtypes.astype(str).to_dict() == frames.COLUMNS["top_threads"]
    assert list(newest.thread_id) == [f"t-{t:05d}" for t in range(THREADS - 1, THREADS - 5, -1)]
    assert list(newest.checkpoints) == [PER_THREAD] * 4


def test_outbox_states_and_rows(bulk: Bulk, store: Store) -> None:
    """Per state: rows and bytes; the first pending rows are the oldest pending ones."""
    size = {row[4]: row[3] for row in bulk.rows}
    states = frames.outbox_states(store).set_index("state")
    assert states.loc["pending", "rows"] == len(bulk.pending)
    assert states.loc["quarantined", "rows"] == len(bulk.quarantined)
    assert states.loc["quarantined", "size_bytes"] == sum(size[s] for s in bulk.quarantined)
    assert states["rows"].sum() == len(bulk.rows)
    assert store.scans.outbox_groups() == Aggregates(store).outbox_groups()
    owners = frames.owners(store)
    pd.testing.assert_frame_equal(
        frames.outbox_states(store, owners=owners),
        states.reset_index()[frames.outbox_states(store).columns],
    )
    # The owners' sums are the totals it uses, not counted again: doubled, the synced row doubles.
    doubled = owners.assign(checkpoints=owners.checkpoints * 2, size_bytes=owners.size_bytes * 2)
    told = frames.outbox_states(store, owners=doubled).set_index("state")
    assert told.loc["synced", "rows"] == states.loc["synced", "rows"] + len(bulk.rows)
    oldest = frames.outbox_rows(store, "pending", limit=3)
    assert list(oldest.seq) == sorted(bulk.pending)[:3]
    assert frames.outbox_rows(store, "quarantined").sync_error.eq("over the cap").all()


def test_backlog_is_counted_on_the_grid_in_the_store(bulk: Bulk, store: Store) -> None:
    """``frames.backlog`` from the store's grouped spans: the pending count and the oldest
    pending age at each instant are those of the rows by hand (a row pending from its write
    until the plane took or refused it), and the SQL grouping equals the chunked default's."""
    for step, origin in ((3_600_000_000, 0), (1_800_000_000, _written(17))):
        assert store.scans.pending_spans(step, origin) == Aggregates(store).pending_spans(
            step, origin
        )
    end = pd.Timestamp(_written(len(bulk.rows)) + 300 * MINUTE, unit="us", tz="UTC")
    frame = frames.backlog(store, freq="1h", end=end.to_pydatetime())
    assert frame["time"].iloc[0] == pd.Timestamp(_written(1), unit="us", tz="UTC").floor("1h")
    with sqlite3.connect(bulk.url.removeprefix("sqlite:///")) as db:
        left = dict(db.execute("SELECT seq, synced_at FROM durability_synced"))
        left |= dict(db.execute("SELECT seq, synced_at FROM durability_outbox"))
    spans = [(_written(s), left[s]) for s in range(1, len(bulk.rows) + 1) if s not in left or
             left[s] is not None or s in bulk.pending]  # fmt: skip
    for time, pending, age in frame.itertuples(index=False):
        at = time.value // 1000
        waiting = [w for w, gone in spans if w <= at and (gone is None or gone > at)]
        assert pending == len(waiting), time
        expected = pd.Timedelta(at - min(waiting), unit="us") if waiting else pd.NaT
        assert age == expected or (pd.isna(age) and pd.isna(expected)), time
    assert frame["pending"].max() > frame["pending"].iloc[-1] == len(bulk.pending)


def test_readiness_summary_is_readiness_summed(store: Store) -> None:
    """The per-owner summary and the worst threads equal the per-thread frame's, summed."""
    full = analyses.readiness(store)
    summary = analyses.readiness_summary(store, top=10)
    shared = analyses.readiness_summary(store, top=10, owners=frames.owners(store))
    pd.testing.assert_frame_equal(shared.by_owner, summary.by_owner)
    pd.testing.assert_frame_equal(shared.not_whole, summary.not_whole)
    pd.testing.assert_frame_equal(summary.by_owner, analyses.readiness_by_owner(full))
    not_whole = full[full.restorable != "everything"].reset_index(drop=True)
    assert summary.not_whole_threads == len(not_whole)
    pd.testing.assert_frame_equal(summary.not_whole, not_whole.head(10))
    assert store.scans.missing_rows() == Aggregates(store).missing_rows()


def test_runs_sample_reads_only_the_sampled_threads(store: Store) -> None:
    """``runs(sample=N)``: the runs of the picked threads exactly as the whole frame has them,
    and ``attrs`` saying how large the sample is."""
    sampled = frames.runs(store, sample=40, seed=3)
    picked = set(sampled.thread_id)
    assert sampled.attrs["sample"] == {"threads": len(picked), "of": THREADS}
    assert 0 < len(picked) <= 40
    full = frames.runs(store)
    expected = full[full.thread_id.isin(picked)].reset_index(drop=True)
    pd.testing.assert_frame_equal(sampled.reset_index(drop=True), expected)
    assert "sample" not in frames.runs(store, sample=THREADS).attrs  # every thread: no sample
    counted = frames.runs(store, sample=40, seed=3, threads=THREADS)  # counted already: not again
    pd.testing.assert_frame_equal(counted, sampled)
    assert counted.attrs == sampled.attrs


def test_a_whole_frame_past_the_cap_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the row cap a whole-store frame stops reading and names the aggregates instead."""
    monkeypatch.setenv(MAX_ROWS_ENV, "1000")
    with pytest.raises(ConfigError, match=r"frames\.checkpoints.*frames\.activity"):
        frames.checkpoints(store)
    with pytest.raises(ConfigError, match=r"frames\.threads.*frames\.owners"):
        frames.threads(store)
    with pytest.raises(ConfigError, match=r"frames\.runs.*sample=N"):
        frames.runs(store)
    assert len(frames.checkpoints(store, thread_id="t-00001")) == PER_THREAD  # one thread: no cap


def test_explore_notebook_reads_no_whole_frame(bulk: Bulk, tmp_path: Path) -> None:
    """The explore notebook on a store of 12,000 checkpoints with the row cap at 2,000: every
    section runs (a whole-store frame would be refused), and the run health says it is a sample."""
    executed = bundle.execute(
        bundle.notebook("explore_store.ipynb"),
        {"store_url": bulk.url, "output_dir": str(tmp_path / "charts")},
        tmp_path / "executed",
        env={MAX_ROWS_ENV: "2000"},
        cwd=tmp_path,
        timeout=600,
    )
    nb = nbformat.read(executed.path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert [o for c in code for o in c.outputs if o.output_type == "error"] == []
    text = "\n".join(o.get("text", "") for c in code for o in c.outputs)
    assert f"{THREADS} threads, {THREADS * PER_THREAD} checkpoints" in text
    assert "a sample: the runs of " in text
    assert f"of {THREADS:,} threads, picked at random" in text


def test_encryption_coverage_from_a_sample_says_so(bulk: Bulk, store: Store) -> None:
    """``frames.encryption(sample=N)`` reads about N envelopes and scales them to the store's
    rows, saying how many it read (the chart too); a store no larger than N is read whole."""
    estimate = frames.encryption(store, sample=300, seed=2)
    assert 200 < estimate.attrs["sampled"] <= 300
    assert estimate["rows"].sum() == len(bulk.rows)  # every row is in clear: one group, scaled
    assert list(estimate["status"]) == ["clear"]
    title = plots.encryption(estimate).get_suptitle()
    assert f"estimated from a sample of {estimate.attrs['sampled']:,} rows" in title
    whole = frames.encryption(store, sample=len(bulk.rows))
    assert whole.attrs["sampled"] is None
    pd.testing.assert_frame_equal(whole, frames.encryption(store))


def test_live_leases_of_a_sample_in_one_read(store: Store) -> None:
    """``live_leases``: which of the given threads hold a live lease, SQL and the per-thread
    default alike (what ``runs(sample=N)`` asks instead of a record per thread)."""
    asked = ["t-00003", "t-00001", "t-00002", "no-such-thread"]
    assert store.scans.live_leases(asked, store.clock()) == []
    store.acquire_lease("t-00001", "worker", "1h", run_id="run-1")
    store.acquire_lease("t-00002", "worker", "1h", run_id="run-2")
    try:
        now = store.clock()
        assert store.scans.live_leases(asked, now) == ["t-00001", "t-00002"]
        assert Aggregates(store).live_leases(asked, now) == ["t-00001", "t-00002"]
        later = now + pd.Timedelta(hours=2).to_pytimedelta()
        assert store.scans.live_leases(asked, later) == []
    finally:
        store.release_lease("t-00001", "worker")
        store.release_lease("t-00002", "worker")


def test_sqlite_outbox_reads_walk_the_outbox_not_every_checkpoint(store: Store) -> None:
    """On SQLite (no table statistics) each read joining the outbox to the checkpoints walks
    the outbox and reads its checkpoints by key: none scans the checkpoints or an index of
    every one of them to probe the outbox (at 10,000,000 rows, a read of the whole index)."""
    sent: list[str] = []

    def capture(statement: str) -> None:
        if " o " in statement and statement.lstrip().upper().startswith(("SELECT", "WITH")):
            sent.append(statement)

    def on_engine(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        capture(statement.replace("?", "1"))

    db: Any = store.db  # type: ignore[attr-defined]
    sa.event.listen(db.engine, "before_cursor_execute", on_engine)
    db._local_connection().set_trace_callback(capture)  # the chunked reads' own connection
    try:
        assert len(frames.outbox_rows(store, "pending", limit=3)) == 3
        frames.outbox_rows(store, "quarantined", limit=3)
        frames.outbox_states(store)
        store.outbox.summary()  # type: ignore[union-attr]
        store.unreplicated()
        analyses.readiness_summary(store, top=5)
    finally:
        db._local_connection().set_trace_callback(None)
        sa.event.remove(db.engine, "before_cursor_execute", on_engine)
    assert len(sent) >= 6
    with sqlite3.connect(store.url.removeprefix("sqlite:///")) as conn:
        for statement in sent:
            plan = [row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {statement}")]
            walks = [step for step in plan if step.startswith("SCAN")]
            assert not [
                w for w in walks if w.startswith(("SCAN c", "SCAN durability_checkpoints"))
            ], (
                statement,
                plan,
            )


def test_write_times_counted_per_bucket_in_the_last_window(bulk: Bulk, store: Store) -> None:
    """``frames.write_times(width=, last=)``: the writes of the last window up to the newest,
    each at its bucket's start, counted in the store; the whole read agrees, row for row."""
    whole = frames.write_times(store)
    assert len(whole) == len(bulk.rows)
    last = timedelta(hours=10)
    recent = whole.created_at[whole.created_at >= whole.created_at.max() - last]
    counted = frames.write_times(store, width="1h", last=last)
    assert counted.attrs["width"] == "1h"
    assert counted.dtypes.astype(str).to_dict() == frames.COLUMNS["write_times"]
    assert counted.created_at.tolist() == sorted(recent.dt.floor("1h"))
    read = frames.write_times(store, last=last)
    assert read.created_at.tolist() == recent.tolist()
    assert read.attrs["width"] is None


@pytest.mark.parametrize("provider", ["sqlite", "postgres"])
def test_owners_count_ledger_threads_holding_no_checkpoint(provider: str, tmp_path: Path) -> None:
    """Per owner, the SQL sums (the checkpoints' totals by ledger owner, then the whole ledger)
    equal the default's: a ledger thread holding no checkpoint counts once, a thread the ledger
    does not record counts under no owner, and every finished mark counts."""
    from durability import Checkpoint
    from tests.conftest import make_target

    for target in make_target(provider, tmp_path):
        with target.open() as store:
            for i in range(6):
                store.put(Checkpoint(thread_id=f"held-{i}"))
                if i % 3:
                    store.record_run_start(f"held-{i}", run_id=f"r{i}", owner=f"o{i % 2}")
            for i in range(4):  # recorded, no checkpoint
                store.record_run_start(f"empty-{i}", run_id=f"e{i}", owner=f"o{i % 2}")
            for thread_id in ("held-1", "empty-0", "empty-3"):
                store.mark_finished(thread_id)
            found = store.scans.owner_groups()
            assert found == Aggregates(store).owner_groups()
            by_owner = dict(zip(found["owner"], found["threads"], strict=True))
            assert by_owner == {"o0": 4, "o1": 4, None: 2}
            assert sum(found["finished"]) == 3
