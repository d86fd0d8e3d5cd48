"""The drain thread: one per store database in a process, running drain passes for its
connections with a capped backoff after a failure, woken by writes and by connects."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from durability.clock import system_clock

if TYPE_CHECKING:
    pass

from durability.replication.outbox import DrainReport

logger = logging.getLogger("durability.replication")


class Backoff:
    """Capped exponential delays: ``initial``, then ×``factor`` up to ``cap``, with ± ``jitter``."""

    def __init__(
        self,
        initial: float = 0.5,
        cap: float = 60.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.1,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.initial, self.cap, self.factor, self.jitter = initial, cap, factor, jitter
        self._rng = rng
        self._current = 0.0

    def next(self, at_least: float | None = None) -> float:
        """The next delay in seconds (at least ``at_least``, e.g. a ``Retry-After``, up to ``cap``)."""
        self._current = min(
            self.cap, self._current * self.factor if self._current else self.initial
        )
        delay = self._current * (1 + self.jitter * (2 * self._rng() - 1))
        return min(self.cap, max(delay, at_least or 0.0))

    def reset(self) -> None:
        """Start again from ``initial`` (after a pass that left nothing buffered)."""
        self._current = 0.0


class DrainWorker:
    """A stoppable thread that runs ``step`` whenever woken, and on a backoff while rows are buffered.

    Args:
        step: One drain pass (e.g. every connection of one store database).
        name: The thread's name.
        backoff: Delays between passes while rows stay buffered (inject a fast one in tests).
        idle_interval: Seconds between passes when nothing woke it (picks up rows other
            processes or other handles wrote).
    """

    def __init__(
        self,
        step: Callable[[], DrainReport],
        *,
        name: str = "durability-drain",
        backoff: Backoff | None = None,
        idle_interval: float = 30.0,
    ) -> None:
        self._step = step
        self.name = name
        self.backoff = backoff if backoff is not None else Backoff()
        self.idle_interval = idle_interval
        #: Set by a write (rows to send) and by :meth:`kick`.
        self._wake = threading.Event()
        #: Set by :meth:`kick`: a pass now, even while backing off.
        self._kick = threading.Event()
        self._stopping = threading.Event()
        self._done = threading.Condition()
        self._requested = 0
        self._completed = 0
        self._thread: threading.Thread | None = None
        #: The delays the worker waited after failed passes (newest last; for inspection).
        self.delays: list[float] = []
        self.last_report: DrainReport | None = None
        self.last_pass_at: datetime | None = None

    def __repr__(self) -> str:
        return f"<DrainWorker {self.name} {'running' if self.running else 'stopped'}>"

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> DrainWorker:
        """Start the thread (a no-op if it runs)."""
        if not self.running:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def wake(self) -> None:
        """Ask for a pass soon; never blocks (a write calls this on its own thread).

        While the worker backs off (the plane could not take rows) a wake waits for the next
        backoff step: a pass per write would hammer a plane that is down and, recording its
        attempts, make every write wait on the store's write lock.
        """
        self._wake.set()

    def kick(self) -> None:
        """Ask for a pass now, even while backing off (a connect, a disconnect, an operator)."""
        self._kick.set()
        self._wake.set()

    def drain_now(self, timeout: float | None = None) -> bool:
        """Kick the worker and wait until a pass that started after this call has finished."""
        with self._done:
            self._requested += 1
            target = self._requested
        self.kick()
        with self._done:
            return self._done.wait_for(lambda: self._completed >= target, timeout)

    def stop(self, timeout: float | None = 10.0) -> bool:
        """Stop the thread after its current pass; ``True`` if it ended within ``timeout``."""
        self._stopping.set()
        self.kick()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def __enter__(self) -> DrainWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        delay: float | None = None
        failures = 0
        logged_at = float("-inf")
        while not self._stopping.is_set():
            if delay is None:
                self._wake.wait(self.idle_interval)
            else:  # backing off: only a kick cuts the delay short, never a write
                self._kick.wait(delay)
            if self._stopping.is_set():
                break
            self._wake.clear()
            self._kick.clear()
            with self._done:
                started = self._requested
            failed, retry_after = True, None
            try:
                report = self._step()
                self.last_report = report
                failed, retry_after = report.buffered > 0, report.retry_after
                if failures:
                    logger.warning("%s recovered after %d failed passes", self.name, failures)
                failures = 0
            except Exception:  # the loop must outlive any failed pass: nothing may stall the outbox
                failures += 1
                # The first failure with its traceback, then at most one a minute: a store or
                # client that stays broken is retried on the backoff without flooding the log.
                if time.monotonic() - logged_at >= 60.0:
                    logged_at = time.monotonic()
                    logger.exception(
                        "a drain pass of %s failed (%d in a row); the rows stay buffered and "
                        "are retried on the backoff",
                        self.name,
                        failures,
                    )
            self.last_pass_at = system_clock()
            with self._done:
                self._completed = max(self._completed, started)
                self._done.notify_all()
            if failed:
                delay = self.backoff.next(retry_after)
                self.delays.append(delay)
                del self.delays[:-100]
            else:
                self.backoff.reset()
                delay = None


__all__ = ["Backoff", "DrainWorker"]
