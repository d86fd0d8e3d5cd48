"""The sweep's Prometheus metrics, in a registry of their own.

They live in :data:`REGISTRY`, not in prometheus_client's global default one, so embedding
``durability`` never adds series to a host application's ``/metrics`` by surprise; the ops
service (``durability serve-ops``) serves :func:`render` on ``GET /metrics``.

* ``durability_checkpoint_sweep_spared_total{horizon,owner}``: threads a live-thread filter
  spared, by horizon and the filter's owner (``park``, ``lease``, ``replication``, …).
* ``durability_checkpoint_sweep_deleted_threads_total{horizon}`` and
  ``durability_checkpoint_sweep_deleted_checkpoints_total{horizon}``: what sweeps deleted.
* ``durability_checkpoint_sweep_runs_total{outcome}``: sweeps by outcome (``success``,
  ``failure``, ``refused``: another sweep of the store held its sweep lock).
* ``durability_checkpoint_sweep_last_success_timestamp_seconds``: wall-clock time of the last
  sweep that succeeded (alert when ``time() -`` it grows past your cadence).

Replication, per project of a store, read from the store at each scrape (:class:`OutboxCollector`,
served by the ops service; only unsent rows and the connection records are read):

* ``durability_outbox_pending_rows{project}`` and ``durability_outbox_pending_bytes{project}``;
* ``durability_outbox_oldest_pending_age_seconds{project}``: 0 when nothing is pending (alert
  when it grows: the plane is not taking rows);
* ``durability_outbox_quarantined_rows{project}``: rows the plane refused;
* ``durability_outbox_last_ack_timestamp_seconds{project}`` and
  ``durability_outbox_drain_seen_timestamp_seconds{project}``: when the plane last acknowledged
  a batch, and when a drain was last alive (absent before the first);
* ``durability_outbox_read_ok``: 0 when the store could not be read for this scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from durability.stores.base import Store

#: The registry holding every ``durability`` metric.
REGISTRY = CollectorRegistry(auto_describe=True)

SWEEP_SPARED = Counter(
    "durability_checkpoint_sweep_spared_total",
    "Threads due for the checkpoint sweep that a live-thread filter spared.",
    ["horizon", "owner"],
    registry=REGISTRY,
)
SWEEP_DELETED_THREADS = Counter(
    "durability_checkpoint_sweep_deleted_threads_total",
    "Threads the checkpoint sweep deleted.",
    ["horizon"],
    registry=REGISTRY,
)
SWEEP_DELETED_CHECKPOINTS = Counter(
    "durability_checkpoint_sweep_deleted_checkpoints_total",
    "Checkpoints the checkpoint sweep deleted (rows written while a thread was deleted included).",
    ["horizon"],
    registry=REGISTRY,
)
SWEEP_RUNS = Counter(
    "durability_checkpoint_sweep_runs_total",
    "Checkpoint sweeps run, by outcome (success, failure, or refused: another sweep held the lock).",
    ["outcome"],
    registry=REGISTRY,
)
THIN_CHECKPOINTS = Counter(
    "durability_checkpoint_thin_checkpoints_total",
    "Checkpoints thinning dropped (older history of threads kept resumable).",
    registry=REGISTRY,
)
THIN_RUNS = Counter(
    "durability_checkpoint_thin_runs_total",
    "Thinning runs that completed.",
    registry=REGISTRY,
)
SWEEP_LAST_SUCCESS = Gauge(
    "durability_checkpoint_sweep_last_success_timestamp_seconds",
    "Unix time of the last checkpoint sweep that succeeded.",
    registry=REGISTRY,
)


def render(*extra: CollectorRegistry) -> bytes:
    """Every metric in :data:`REGISTRY` (and ``extra`` registries) in the Prometheus text
    exposition format."""
    return b"".join(bytes(generate_latest(r)) for r in (REGISTRY, *extra))


class OutboxCollector:
    """The replication gauges of one store, computed when scraped from
    :meth:`~durability.stores.base.Store.outbox_summary` and the connection records."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        from durability.errors import DurabilityError

        ok = GaugeMetricFamily(
            "durability_outbox_read_ok", "1 when the store's outbox could be read for this scrape."
        )
        try:
            summaries = {s.project_id: s for s in self.store.outbox_summary()}
            records = {c.project_id: c for c in self.store.connections()}
            now = self.store.clock()
        except DurabilityError:
            ok.add_metric([], 0)
            yield ok
            return
        ok.add_metric([], 1)
        yield ok
        families = {
            name: GaugeMetricFamily(f"durability_outbox_{name}", text, labels=["project"])
            for name, text in (
                ("pending_rows", "Checkpoints the plane does not have yet, by project."),
                ("pending_bytes", "Stored bytes of the pending checkpoints, by project."),
                ("oldest_pending_age_seconds", "Age of the oldest pending checkpoint (0: none)."),
                ("quarantined_rows", "Checkpoints the plane refused, by project."),
                ("last_ack_timestamp_seconds", "Unix time the plane last acknowledged a batch."),
                (
                    "drain_seen_timestamp_seconds",
                    "Unix time a drain of the project was last alive.",
                ),
            )
        }
        for project in sorted(set(summaries) | set(records)):
            summary, record = summaries.get(project), records.get(project)
            oldest = None if summary is None else summary.oldest_pending_at
            values = {
                "pending_rows": 0 if summary is None else summary.pending,
                "pending_bytes": 0 if summary is None else summary.pending_bytes,
                "oldest_pending_age_seconds": 0.0
                if oldest is None
                else max(0.0, (now - oldest).total_seconds()),
                "quarantined_rows": 0 if summary is None else summary.quarantined,
                "last_ack_timestamp_seconds": None
                if record is None or record.acked_at is None
                else record.acked_at.timestamp(),
                "drain_seen_timestamp_seconds": None
                if record is None or record.seen_at is None
                else record.seen_at.timestamp(),
            }
            for name, value in values.items():
                if value is not None:
                    families[name].add_metric([project], float(value))
        yield from families.values()


#: The content type to serve :func:`render`'s output with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
