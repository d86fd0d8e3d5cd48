"""Erasure from the command line and in the frames: preview, receipt, idempotency, reopen."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

import durability
from durability import frames
from durability.cli import cli
from durability.model import Checkpoint
from durability.settings import Settings


def _store(path: Path) -> str:
    url = f"sqlite:///{path / 'erase.db'}"
    with durability.open(url, settings=Settings()) as store:
        store.put_many([Checkpoint(thread_id="customer-42", state={"n": n}) for n in range(3)])
        store.put(Checkpoint(thread_id="customer-7"))
    return url


def test_cli_previews_then_erases_with_a_receipt(tmp_path: Path) -> None:
    """Without --yes the JSON is a preview and nothing goes; with --yes a receipt, then idempotent."""
    url = _store(tmp_path)
    runner = CliRunner()
    preview = runner.invoke(cli, ["threads", "erase", url, "customer-42", "--json"])
    assert preview.exit_code == 0, preview.output
    shown = json.loads(preview.output)
    assert shown["preview"] is True
    assert shown["checkpoints"] == 3
    with durability.open(url) as store:
        assert store.thread("customer-42") is not None
    done = runner.invoke(
        cli, ["threads", "erase", url, "customer-42", "--yes", "--json", "--by", "dpo"]
    )
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.output)
    assert receipt["store"]["checkpoints"] == 3
    assert receipt["already_erased"] is False
    assert receipt["erased_by"] == "dpo"
    assert receipt["unreachable"]
    assert "customer-42" not in done.output
    again = json.loads(
        runner.invoke(cli, ["threads", "erase", url, "customer-42", "--yes", "--json"]).output
    )
    assert again["already_erased"] is True
    assert again["store"]["checkpoints"] == 0
    with durability.open(url) as store:
        assert store.thread("customer-42") is None
        assert store.thread("customer-7") is not None
        frame = frames.erasures(store)
    assert frame.dtypes.astype(str).to_dict() == frames.COLUMNS["erasures"]
    assert frame["tombstone"].tolist() == [receipt["tombstone"]]
    assert frame["checkpoints"].tolist() == [3]
    assert frame["erased_by"].tolist() == ["dpo"]


def test_cli_reopen_lets_the_id_back_in(tmp_path: Path) -> None:
    """`threads reopen` lifts the tombstone; a thread never erased is refused by name."""
    url = _store(tmp_path)
    runner = CliRunner()
    assert runner.invoke(cli, ["threads", "erase", url, "customer-42", "--yes"]).exit_code == 0
    refused = runner.invoke(cli, ["threads", "reopen", url, "customer-7", "--yes"])
    assert refused.exit_code != 0
    assert "not erased" in refused.output
    assert runner.invoke(cli, ["threads", "reopen", url, "customer-42", "--yes"]).exit_code == 0
    with durability.open(url) as store:
        store.put(Checkpoint(thread_id="customer-42"))
        assert store.thread("customer-42") is not None


def test_explorer_erase_button_asks_then_erases(tmp_path: Path) -> None:
    """The explorer's Erase button previews, Cancel keeps the thread, Confirm erases it."""
    from durability.widgets import StoreExplorer

    url = _store(tmp_path)
    with durability.open(url, settings=Settings()) as store:
        explorer = StoreExplorer(store)
        explorer.thread.value = "customer-42"
        controls = explorer.erasing
        controls.erase.click()
        assert "3 checkpoints" in controls.preview.value
        assert controls.asking.layout.display == ""
        controls.cancel.click()
        assert controls.asking.layout.display == "none"
        assert store.thread("customer-42") is not None
        controls.erase.click()
        controls.confirm.click()
        assert controls.receipt is not None
        assert controls.receipt.store["checkpoints"] == 3
        assert controls.receipt.erased_by == "notebook"
        assert store.thread("customer-42") is None
        assert "customer-42" not in explorer.page
        assert controls.receipt.tombstone in controls.status.value
