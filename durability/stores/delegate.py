"""A store method that hands the call to one of the store's capabilities.

``store.mark_finished(t)`` is ``store.ledger.mark_finished(t)``: the names callers used when
the store was one class keep working, typed as the capability's own method. On a store that
lacks the capability the call raises the store's refusal for it (:meth:`DelegatingAliases.missing`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from durability._util import redact_url
from durability.errors import CapabilityError, DurabilityError, ParkRefused
from durability.stores.ledger import Ledger
from durability.stores.outbox import Outbox
from durability.stores.parks import Parks
from durability.stores.scans import Scans

if TYPE_CHECKING:
    from durability.stores.base import Store

P = ParamSpec("P")
R = TypeVar("R")


class Delegate(Generic[P, R]):
    """``store.<name>(…)`` → ``store.<capability>.<method>(…)``."""

    def __init__(self, capability: str, method: Callable[Concatenate[Any, P], R]) -> None:
        self.capability = capability
        self.method = method.__name__
        self.__doc__ = f"Delegates to ``store.{capability}.{self.method}`` (see there)."

    @overload
    def __get__(self, store: None, owner: type) -> Delegate[P, R]: ...

    @overload
    def __get__(self, store: Store, owner: type) -> Callable[P, R]: ...

    def __get__(self, store: Store | None, owner: type) -> Delegate[P, R] | Callable[P, R]:
        if store is None:
            return self
        target = getattr(store, self.capability)
        if target is None:
            return self._refuse(store)
        bound: Callable[P, R] = getattr(target, self.method)
        return bound

    def _refuse(self, store: Store) -> Callable[P, R]:
        def refuse(*_args: P.args, **_kwargs: P.kwargs) -> R:
            action = self.method.replace("_", " ")
            raise store.missing(self.capability, action)

        return refuse


class DelegatingAliases:
    """The single-class contract's method names, kept for its callers: each hands the call to
    the capability that now owns it (``store.park`` is ``store.parks.park``), or raises the
    store's refusal for a capability it lacks (:meth:`missing`)."""

    provider: str
    url: str

    def missing(self, capability: str, action: str) -> DurabilityError:
        """The refusal for ``action`` on a store that lacks ``capability``."""
        name = self.provider or type(self).__name__
        if capability == "parks":
            return ParkRefused(
                f"cannot {action}: the {name} store {redact_url(self.url)} cannot hold a parked "
                "run (a paused run must be readable by whichever worker resumes it); use a "
                "shared store (postgres or redis) for runs that park"
            )
        what = {
            "ledger": "keeps no thread ledger",
            "outbox": "keeps no outbox, so it does not replicate",
        }
        return CapabilityError(
            f"cannot {action}: the {name} store {what.get(capability, 'lacks ' + capability)}"
        )

    record_run_start = Delegate("ledger", Ledger.record_run_start)
    mark_finished = Delegate("ledger", Ledger.mark_finished)
    unmark_finished = Delegate("ledger", Ledger.unmark_finished)
    acquire_lease = Delegate("ledger", Ledger.acquire_lease)
    renew_lease = Delegate("ledger", Ledger.renew_lease)
    release_lease = Delegate("ledger", Ledger.release_lease)
    finished_due = Delegate("ledger", Ledger.finished_due)
    park = Delegate("parks", Parks.park)
    claim_park = Delegate("parks", Parks.claim)
    get_park = Delegate("parks", Parks.get)
    fetch_unsynced = Delegate("outbox", Outbox.fetch_unsynced)
    fetch_unsynced_encoded = Delegate("outbox", Outbox.fetch_unsynced_encoded)
    mark_synced = Delegate("outbox", Outbox.mark_synced)
    mark_sent = Delegate("outbox", Outbox.mark_sent)
    mark_quarantined = Delegate("outbox", Outbox.mark_quarantined)
    record_attempt = Delegate("outbox", Outbox.record_attempt)
    release = Delegate("outbox", Outbox.release)
    record_connection = Delegate("outbox", Outbox.record_connection)
    record_disconnection = Delegate("outbox", Outbox.record_disconnection)
    forget_connection = Delegate("outbox", Outbox.forget_connection)
    connections = Delegate("outbox", Outbox.connections)
    record_heartbeat = Delegate("outbox", Outbox.record_heartbeat)
    outbox_summary = Delegate("outbox", Outbox.summary)
    checkpoint_columns = Delegate("scans", Scans.checkpoint_columns)
    thread_columns = Delegate("scans", Scans.thread_columns)
    outbox_columns = Delegate("scans", Scans.outbox_columns)
    run_end_outputs = Delegate("scans", Scans.run_end_outputs)
    checkpoints_of_runs = Delegate("scans", Scans.checkpoints_of_runs)
    sweep_records = Delegate("scans", Scans.sweep_records)
    sweep_columns = Delegate("scans", Scans.sweep_columns)
    delete_order = Delegate("scans", Scans.delete_order)
    delete_threads = Delegate("scans", Scans.delete_threads)
    still_holding = Delegate("scans", Scans.still_holding)
