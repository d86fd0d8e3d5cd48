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
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

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
SWEEP_LAST_SUCCESS = Gauge(
    "durability_checkpoint_sweep_last_success_timestamp_seconds",
    "Unix time of the last checkpoint sweep that succeeded.",
    registry=REGISTRY,
)


def render() -> bytes:
    """Every metric in :data:`REGISTRY` in the Prometheus text exposition format."""
    return bytes(generate_latest(REGISTRY))


#: The content type to serve :func:`render`'s output with.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
