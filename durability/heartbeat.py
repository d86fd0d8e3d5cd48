"""Keeping a running run's lease alive: one renewal step plus a thin, stoppable loop.

A run holds a lease on its thread while it executes, so no other worker runs it meanwhile. :meth:`Heartbeat.beat_once`
renews it once; :meth:`Heartbeat.start` runs that on a daemon thread every ``interval``
seconds of real time, while the lease's expiry is measured on the store's clock. A failed
renewal (the store briefly unreachable) never kills the thread: it retries sooner, backing off
up to the interval. A lost lease (another holder took the thread) ends the loop and is reported
to ``on_lost``, so the run stops at its next check instead of writing over another worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Self

from durability.errors import LeaseLost
from durability.model import Lease
from durability.stores.base import Store

log = logging.getLogger(__name__)

#: The first retry after a failed renewal, in seconds; doubled on each failure up to the interval.
FIRST_RETRY = 0.05


class Heartbeat:
    """Renew ``holder``'s lease on ``thread_id`` every ``interval`` seconds until stopped.

    Use it as a context manager around the work the lease protects::

        with Heartbeat(store, thread_id, holder, ttl=timedelta(seconds=30), interval=10):
            ...

    ``lost`` holds the :class:`~durability.errors.LeaseLost` once the lease is gone.
    """

    def __init__(
        self,
        store: Store,
        thread_id: str,
        holder: str,
        *,
        ttl: timedelta,
        interval: float,
        on_lost: Callable[[LeaseLost], None] | None = None,
    ) -> None:
        self.store = store
        self.thread_id = thread_id
        self.holder = holder
        self.ttl = ttl
        self.interval = interval
        self.on_lost = on_lost
        self.lost: LeaseLost | None = None
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat_once(self) -> Lease:
        """Renew the lease now; raise :class:`~durability.errors.LeaseLost` if it is gone."""
        lease = self.store.renew_lease(self.thread_id, self.holder, self.ttl)
        self.beats += 1
        return lease

    def start(self) -> None:
        """Start renewing on a daemon thread."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._loop, name=f"durability-heartbeat:{self.thread_id[:40]}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Stop renewing; return whether the thread ended within ``timeout`` seconds."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        delay = self.interval
        failures = 0
        while not self._stop.wait(delay):
            try:
                self.beat_once()
            except LeaseLost as exc:
                self.lost = exc
                log.error("%s", exc)
                if self.on_lost is not None:
                    self.on_lost(exc)
                return
            except Exception as exc:  # a failure never kills the heartbeat: retry sooner
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "could not renew the lease on thread %r (attempt %d): %s",
                        self.thread_id[:80],
                        failures,
                        exc,
                    )
                delay = min(self.interval, FIRST_RETRY * 2 ** min(failures - 1, 16))
                continue
            if failures:
                log.info("renewed the lease on thread %r again", self.thread_id[:80])
            failures = 0
            delay = self.interval
