"""The store explorer's Erase button: a preview, a confirmation, then the receipt.

A thin view over :func:`durability.stores.erasure.plan_erasure` (the preview) and
:func:`durability.replication.erase_thread` (the erasure, asking every plane the store
replicates to); the receipt is shown as JSON, as the CLI prints it.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING

import ipywidgets as w

from durability.humanize import format_bytes
from durability.replication.erasure import erase_thread
from durability.stores.erasure import ErasureReceipt, plan_erasure
from durability.widgets._parts import button, guarded, message

if TYPE_CHECKING:
    from durability.stores.base import Store


class EraseControls:
    """Erase the picked thread: ``.erase`` asks (``.preview``), ``.confirm`` erases, ``.cancel``
    backs out. ``receipt`` holds the last receipt; ``done`` is called after an erasure."""

    def __init__(self, store: Store, thread: Callable[[], str | None], done: Callable[[], None]):
        self.store = store
        self._thread = thread
        self._done = done
        self.erase = button("Erase…", "durability-explorer-erase", button_style="danger")
        self.confirm = button("Erase for good", "durability-explorer-erase-confirm")
        self.cancel = button("Cancel", "durability-explorer-erase-cancel")
        self.preview = w.HTML()
        self.status = w.HTML()
        self.asking = w.VBox([self.preview, w.HBox([self.confirm, self.cancel])])
        self.asking.layout.display = "none"
        self.receipt: ErasureReceipt | None = None
        self.erase.disabled = store.tombstones is None
        self.erase.on_click(lambda _: guarded(self.status, self.ask))
        self.confirm.on_click(lambda _: guarded(self.status, self.apply))
        self.cancel.on_click(lambda _: self._close())
        self.widget = w.VBox([self.erase, self.asking, self.status])

    def ask(self) -> None:
        """Show what erasing the picked thread would remove, and the confirmation."""
        thread_id = self._thread()
        if thread_id is None:
            self.status.value = message("pick a thread first", error=True)
            return
        plan = plan_erasure(self.store, thread_id)
        self.preview.value = (
            f"<p>Erase thread <b>{html.escape(thread_id)}</b> for good: {plan.checkpoints} "
            f"checkpoints ({format_bytes(plan.bytes)}), {plan.pending_writes} pending writes, "
            f"{len(plan.outbox_pending)} unsent and {len(plan.outbox_quarantined)} quarantined "
            "outbox rows (never sent), its ledger record and park; the plane is asked too. "
            "Later writes to it are refused.</p>"
        )
        self.status.value = ""
        self.asking.layout.display = ""

    def apply(self) -> None:
        """Erase the picked thread and show the receipt."""
        thread_id = self._thread()
        if thread_id is None:
            return
        self.receipt = erase_thread(self.store, thread_id, by="notebook")
        self._close()
        self.status.value = f"<pre>{html.escape(self.receipt.to_json())}</pre>"
        self._done()

    def _close(self) -> None:
        self.asking.layout.display = "none"
        self.preview.value = ""
